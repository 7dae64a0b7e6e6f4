"""src/acceptance_data/vllm_metrics.py: per-position rates from saved vLLM /metrics text.

The metrics files are made the way a vLLM V1 server makes them: prometheus_client Counters with
vLLM's names, HELP strings and labels (vllm/v1/spec_decode/metrics.py, SpecDecodingProm; labels
model_name and engine from vllm/v1/metrics/loggers.py), incremented as
SpecDecodingStats.observe_draft does (per_pos[i] += 1 for every accepted position i of a draft),
and exposed with generate_latest (text format 0.0.4, `_total` samples and `_created` gauges).
"""
import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from src.acceptance_data.vllm_metrics import (
    derive_acceptance,
    describe,
    load_vllm_acceptance,
    parse_counters,
    to_modes,
)
from src.config import ConfigError

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def accepted_lengths(rng, rates, drafts):
    """Accepted prefix length of each draft under conditional rates a_1..a_k."""
    k = len(rates)
    accepted = np.zeros(drafts, dtype=int)
    alive = np.ones(drafts, dtype=bool)
    for i in range(k):
        alive &= rng.random(drafts) < rates[i]
        accepted += alive
    return accepted


def vllm_metrics_text(engines: dict, k: int, extra: str = "") -> str:
    """engines: {(model_name, engine): accepted lengths per draft} -> /metrics text as vLLM V1
    serves it."""
    reg = CollectorRegistry()
    labelnames = ["model_name", "engine"]
    drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labelnames,
                     registry=reg)
    draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                           labelnames,
                           registry=reg)
    accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                       labelnames,
                       registry=reg)
    per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                      "Accepted tokens per draft position.",
                      labelnames + ["position"], registry=reg)
    other = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labelnames,
                    registry=reg)
    for (model, engine), lengths in engines.items():
        drafts.labels(model, engine).inc(len(lengths))
        draft_tokens.labels(model, engine).inc(k * len(lengths))
        accepted.labels(model, engine).inc(int(lengths.sum()))
        for pos in range(k):
            per_pos.labels(model, engine, str(pos)).inc(int((lengths > pos).sum()))
        other.labels(model, engine).inc(int(lengths.sum() + len(lengths)))
    return extra + generate_latest(reg).decode()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_two_engines_give_the_per_position_rates_they_were_drawn_from(tmp_path):
    rng = np.random.default_rng(1)
    rates = (0.8, 0.65, 0.55, 0.5)
    engines = {(MODEL, "0"): accepted_lengths(rng, rates, 60_000),
               (MODEL, "1"): accepted_lengths(rng, rates, 40_000)}
    text = vllm_metrics_text(engines, 4)
    assert "vllm:spec_decode_num_drafts_total{" in text and "_created{" in text  # the real spelling
    acc = load_vllm_acceptance(write(tmp_path, "metrics.txt", text))
    lengths = np.concatenate(list(engines.values()))
    assert acc.drafts == 100_000 and acc.accepted_tokens == lengths.sum()
    assert acc.counters.engines == 2 and acc.counters.model_names == (MODEL,)
    # exact ratios of the counts ...
    counts = [100_000] + [(lengths > i).sum() for i in range(4)]
    assert acc.rates == pytest.approx([counts[i + 1] / counts[i] for i in range(4)])
    # ... which recover the rates within 5 binomial standard errors
    se = np.sqrt(np.asarray(rates) * (1 - np.asarray(rates)) / np.asarray(counts[:4]))
    assert np.all(np.abs(np.asarray(acc.rates) - rates) <= 5 * se)
    assert acc.mean_acceptance_length == pytest.approx(1 + lengths.mean())
    text_out = "\n".join(describe(acc))
    assert "drafts 100000" in text_out and "a1=0.8" in text_out and "a4=0.5" in text_out


def test_older_spelling_without_total_gives_the_same_numbers(tmp_path):
    """Counters printed under their family names (no _total, no _created), as older exporters and
    LLM.get_metrics name them; with and without TYPE lines."""
    rng = np.random.default_rng(2)
    lengths = accepted_lengths(rng, (0.7, 0.6, 0.5), 20_000)
    new = load_vllm_acceptance(write(tmp_path, "new.txt",
                                     vllm_metrics_text({(MODEL, "0"): lengths}, 3)))
    lines = []
    for line in vllm_metrics_text({(MODEL, "0"): lengths}, 3).splitlines():
        if "_created" in line:
            continue
        lines.append(line.replace("_total", ""))
    old_typed = "\n".join(lines) + "\n"
    old_untyped = "\n".join(x for x in lines if not x.startswith("#")) + "\n"
    for name, text in (("typed.txt", old_typed), ("untyped.txt", old_untyped)):
        assert "vllm:spec_decode_num_drafts{" in text
        old = load_vllm_acceptance(write(tmp_path, name, text))
        assert old.rates == new.rates and old.drafts == new.drafts


def test_model_name_picks_one_model_otherwise_all_are_summed(tmp_path):
    rng = np.random.default_rng(3)
    good, bad = accepted_lengths(rng, (0.9, 0.8), 5000), accepted_lengths(rng, (0.3, 0.2), 5000)
    path = write(tmp_path, "m.txt", vllm_metrics_text({("big", "0"): good, ("small", "0"): bad}, 2))
    both = load_vllm_acceptance(path)
    big = load_vllm_acceptance(path, model_name="big")
    assert both.drafts == 10_000 and big.drafts == 5000
    assert big.rates[0] == pytest.approx((good > 0).mean())
    assert both.counters.model_names == ("big", "small")
    with pytest.raises(ConfigError) as e:
        load_vllm_acceptance(path, model_name="medium")
    assert str(e.value) == ("--model-name: no speculative-decoding counters with "
                            f"model_name='medium' in {path}; found: 'big', 'small'")


def test_two_snapshots_use_the_difference(tmp_path):
    rng = np.random.default_rng(4)
    early = accepted_lengths(rng, (0.5, 0.5), 10_000)  # a different workload before the window
    window = accepted_lengths(rng, (0.85, 0.7), 30_000)
    before = write(tmp_path, "before.txt", vllm_metrics_text({(MODEL, "0"): early}, 2))
    after = write(tmp_path, "after.txt",
                  vllm_metrics_text({(MODEL, "0"): np.concatenate([early, window])}, 2))
    acc = load_vllm_acceptance(f"{before},{after}")
    assert acc.drafts == 30_000
    assert acc.rates[0] == pytest.approx((window > 0).mean())
    assert acc.rates[1] == pytest.approx((window > 1).sum() / (window > 0).sum())
    with pytest.raises(ConfigError) as e:
        load_vllm_acceptance(f"{after},{before}")
    assert "vllm:spec_decode_num_drafts decreased from 40000" in str(e.value)
    assert "expected the second file to be a later snapshot" in str(e.value)


def test_to_modes_gives_the_rates_and_their_iid_inversion():
    from src.acceptance import expected_tokens_per_step
    counters = parse_counters(vllm_metrics_text({(MODEL, "0"): np.array([0, 1, 2, 3, 3, 2, 1, 3])},
                                                3),
                              "x")
    acc = derive_acceptance(counters)
    modes = to_modes(acc)
    per_position = modes["vllm_per_position"]
    assert per_position.rates == acc.rates and per_position.compare_with == "vllm_iid"
    (alpha,) = modes["vllm_iid"].rates
    assert expected_tokens_per_step(alpha, 3) == pytest.approx(acc.mean_acceptance_length)


GOOD = vllm_metrics_text({(MODEL, "0"): np.array([0, 1, 2, 3, 3, 2, 1, 3])}, 3)


@pytest.mark.parametrize("text,needle", [
    (("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 3.0\n'),
     "no speculative-decoding counters (vllm:spec_decode_num_drafts_total"),
    ("", "no speculative-decoding counters"),
    (GOOD.replace('position="1"} 5.0', 'position="1"} 8.0'),
     'per_pos{position="1"} = 8 exceeds position="0" = 7; expected counts that never rise'),
    (GOOD.replace('position="0"} 7.0', 'position="0"} 9.0'),
     'per_pos{position="0"} = 9 exceeds vllm:spec_decode_num_drafts = 8'),
    (GOOD.replace('position="2"} 3.0', 'position="2"} 0.0'),
     "no draft token was accepted at position 2 (conditional rate 0); expected rates in (0, 1]"),
    (GOOD + "vllm:spec_decode_num_drafts{engine=\"0\" 3\n",
     "is not valid Prometheus text exposition format"),
    ("\n".join(x for x in GOOD.splitlines() if "per_pos" not in x) + "\n",
     "no vllm:spec_decode_num_accepted_tokens_per_pos_total counters"),
    (GOOD + f'vllm:spec_decode_num_drafts{{engine="0",model_name="{MODEL}"}} 8.0\n',
     "appears twice"),
    (GOOD.replace('position="1"', 'position="one"'), "expected a label position=\"0\""),
    (GOOD.replace('position="1"', 'position="4"'), "expected every position 0..4"),
    (GOOD.replace(f'accepted_tokens_total{{engine="0",model_name="{MODEL}"}} 15.0',
                  f'accepted_tokens_total{{engine="0",model_name="{MODEL}"}} 30.0'),
     "vllm:spec_decode_num_accepted_tokens = 30 exceeds vllm:spec_decode_num_draft_tokens = 24"),
    (GOOD.replace(f'accepted_tokens_total{{engine="0",model_name="{MODEL}"}} 15.0',
                  f'accepted_tokens_total{{engine="0",model_name="{MODEL}"}} 12.0'),
     "the per-position counts sum to 15 but vllm:spec_decode_num_accepted_tokens is 12"),
    (GOOD.replace(f'draft_tokens_total{{engine="0",model_name="{MODEL}"}} 24.0',
                  f'draft_tokens_total{{engine="0",model_name="{MODEL}"}} 25.0'),
     "vllm:spec_decode_num_draft_tokens = 25 exceeds drafts x positions = 8 x 3"),
], ids=["no-spec-counters", "empty", "rising", "above-drafts", "zero-rate", "malformed",
        "no-per-pos",
        "duplicate", "bad-position", "gap", "accepted-above-drafted", "per-position-sum",
        "draft-tokens-above-k"])
def test_bad_metrics_are_one_line_naming_the_problem(tmp_path, text, needle):
    with pytest.raises(ConfigError) as e:
        load_vllm_acceptance(write(tmp_path, "bad.txt", text))
    message = str(e.value)
    assert message.startswith("--acceptance-from-vllm: ")
    assert needle in message and "\n" not in message


def test_missing_file_and_bad_option_value(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_vllm_acceptance(str(tmp_path / "nope.txt"))
    with pytest.raises(ConfigError, match="expected FILE or BEFORE,AFTER"):
        load_vllm_acceptance("a,b,c")


def test_accepted_above_drafted_is_one_line_from_the_command_line(tmp_path):
    """It once went on to invert a mean acceptance length above gamma + 1: a traceback."""
    from helpers import run_captured
    text = GOOD.replace(f'accepted_tokens_total{{engine="0",model_name="{MODEL}"}} 15.0',
                        f'accepted_tokens_total{{engine="0",model_name="{MODEL}"}} 30.0')
    done = run_captured(["--acceptance-from-vllm", write(tmp_path, "m.txt", text),
                         "--out", str(tmp_path / "out"), "--quiet"])
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: --acceptance-from-vllm: ") and "exceeds" in done.stderr
    assert not (tmp_path / "out").exists()
