"""src/acceptance_data/sglang.py: a mean acceptance length at a known draft length -> alpha."""
import pytest

from src.acceptance import expected_tokens_per_step
from src.acceptance_data.sglang import acceptance_from_length, describe, to_mode
from src.config import ConfigError


def test_length_is_inverted_with_the_bonus_token_included():
    # SGLang counts accepted drafts + 1 per request and verification: tau = E[K + 1]
    acc = acceptance_from_length("3.2", "4")
    assert float(expected_tokens_per_step(acc.alpha, 4)) == pytest.approx(3.2)
    assert acc.mode_name == "tau3.2_k4"
    assert "alpha = 0.7" in describe(acc)[0]
    assert to_mode(acc).rates == (acc.alpha,)


@pytest.mark.parametrize("tau,k,needle", [
    ("1.0", "4", ("--acceptance-length: mean acceptance length (bonus token included) must lie "
                  "strictly between 1 and K + 1 = 5, got 1.0")),
    ("5", "4", "strictly between 1 and K + 1 = 5"),
    ("abc", "4", "--acceptance-length: expected a number"),
    ("2.5", None, "--gamma-measured: required with --acceptance-length"),
    ("2.5", "0", "--gamma-measured: must be an integer in 1..64"),
    ("2.5", "2.5", "--gamma-measured: expected an integer"),
    ("4.999", "4", "expected one in 0.001..0.999"),
])
def test_bad_lengths_name_the_option(tau, k, needle):
    with pytest.raises(ConfigError) as e:
        acceptance_from_length(tau, k)
    assert needle in str(e.value)
