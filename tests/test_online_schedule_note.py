"""summary.txt's 'Schedules compared' line: where the serving section's schedule and H3's for the
same deployment differ, one line says why and which to paste for what (issue 19)."""
from src.online.schedule_note import PREFIX, SECTION_BEGIN, SECTION_END, with_schedule_note


def summary(h3_ranges="[[1, 63, 4], [64, 128, 3]]", scenario="dep"):
    hardware = (f"Hardware scenario: {scenario}\n=====\n"
                "  context      prompts ...; the KV cache grows as tokens\n"
                "               are generated (mean context during decoding 1616 tokens)\n\n"
                "H3. Optimal gamma by batch size ...\n"
                "   vllm-v1, good:\n"
                '     {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": '
                f"{h3_ranges}}}\n     vs the best fixed gamma (4): +0.5% / +2.5%\n\n"
                "H4. Where context length changes the answer\n")
    serving = (f"{SECTION_BEGIN}\n"
               "Deployment: dep (t + draft d on g, tp 1), engine profile vllm-v1.\n"
               "Workload: sharegpt (Kwon et al); arrivals poisson; acceptance mode good.\n"
               'Default gamma: 5, ...; schedule: {"num_speculative_tokens": 5, '
               '"num_speculative_tokens_per_batch_size": [[1, 3, 5], [4, 1024, 4]]}\n'
               "Schedule optimised for: the steady state at this workload's mean context "
               "(328 tokens: prompt plus half the output; ...).\n\nS1. ...\n"
               f"{SECTION_END}\n")
    return "Batched speculative decoding: summary\n\n" + hardware + "\n" + serving


def test_a_differing_schedule_gets_one_line_saying_why_and_which_to_use():
    text = with_schedule_note(summary())
    lines = text.splitlines()
    notes = [x for x in lines if x.startswith(PREFIX)]
    assert len(notes) == 1
    assert lines[lines.index(notes[0]) - 1].startswith("Schedule optimised for:")
    line = notes[0]
    assert "[[1, 63, 4], [64, 128, 3]]" in line and "1616 tokens" in line and "328 tokens" in line
    assert "Paste this section's for online traffic like sharegpt, H3's for offline batches" in line
    assert with_schedule_note(text) == text  # idempotent: rewritten, not added again


def test_the_same_schedule_says_so_and_no_h3_means_no_line():
    same = with_schedule_note(summary("[[1, 3, 5], [4, 1024, 4]]"))
    assert f"{PREFIX} H3 (dep, vllm-v1, good) gives the same." in same
    other = with_schedule_note(summary(scenario="another"))
    assert PREFIX not in other
    # a stale line goes when the H3 it compared with is no longer there
    stale = with_schedule_note(summary()).replace("Hardware scenario: dep", "Hardware scenario: x")
    assert PREFIX not in with_schedule_note(stale)
