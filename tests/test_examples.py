"""The examples run and do what they say."""

import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "examples"))

import greedy_search  # noqa: E402
import random_search  # noqa: E402


def test_random_search_finds_a_sequence_with_a_reward():
    reward, actions = random_search.random_search(str(EXAMPLES / "sum_array.c"), episodes=4, steps=40)
    assert reward > 0 and 0 < len(actions) <= 40     # random passes often do nothing; some of 160 must help


def test_greedy_search_with_forks_lowers_the_count():
    count, oz, actions = greedy_search.greedy_search(str(EXAMPLES / "sum_array.c"), steps=4,
                                                    actions=[111, 60, 27, 90, 33, 5])
    assert actions and count < 63 and count >= 1


def test_rl_wrapper_runs_an_episode():
    done = subprocess.run([sys.executable, str(REPO / "examples" / "rl_wrapper.py"), str(EXAMPLES / "matmul.c")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "(56,) float32" in done.stdout
