"""CompilerGym 0.2.5's ``compiler_gym.random_search``: a random search over an environment's actions, run by
worker threads until a time limit, that writes its logs to a folder and replays the best actions found.

    from behavioral_pq.env.compiler_gym import gym
    from behavioral_pq.env.compiler_gym.random_search import random_search

    def make_env():
        return gym.make("llvm-autophase-ic-v0", benchmark="benchmark://examples-v0/matmul")

    env = random_search(make_env, outdir="search", total_runtime=10, patience=50, nproc=2)
    env.close()

Each worker repeats episodes of random actions; an episode ends after ``patience`` actions without a better
return (default: the size of the action space). The folder gets CompilerGym's files: ``random_search.json``
(environment, benchmark, reward, patience), ``random_search_progress.csv`` (each improvement),
``random_search_best_actions.txt`` (one action name a line), ``random_search_best_actions_commandline.txt``,
and from the replay ``random_search_best_actions_progress.csv``, ``unoptimized.bc`` and ``optimized.bc``.
Progress is logged (CompilerGym prints it).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Callable, List, NamedTuple, Optional, Union

from behavioral_pq.env.compiler_gym.env import CompilerEnv, LlvmEnv

logger = logging.getLogger(__name__)

#: Seconds between two looks at the workers' progress.
POLL_SECONDS = 0.5


class RandomSearchProgressLogEntry(NamedTuple):
    """A snapshot of the search: a row of ``random_search_progress.csv``."""

    runtime_seconds: float
    total_episode_count: int
    total_step_count: int
    num_passes: int
    reward: float

    def to_csv(self) -> str:
        return ",".join([f"{self.runtime_seconds:.3f}", str(self.total_episode_count), str(self.total_step_count),
                         str(self.num_passes), str(self.reward)])

    @classmethod
    def from_csv(cls, line: str) -> "RandomSearchProgressLogEntry":
        runtime_seconds, total_episode_count, total_step_count, num_passes, reward = line.split(",")
        return cls(float(runtime_seconds), int(total_episode_count), int(total_step_count), int(num_passes),
                   float(reward))


class RandomAgentWorker(threading.Thread):
    """A thread that runs random episodes on environments from ``make_env`` until its ``alive`` is set to
    False (after at least one episode), keeping the best return, its actions and command line."""

    def __init__(self, make_env: Callable[[], CompilerEnv], patience: int):
        super().__init__(daemon=True)
        self._make_env = make_env
        self._patience = patience
        self.total_environment_count = 0
        self.total_episode_count = 0
        self.total_step_count = 0
        self.best_returns = -float("inf")
        self.best_actions: List[int] = []
        self.best_commandline = ""
        self.best_found_at_time = time.time()
        self.error: Optional[BaseException] = None
        self.alive = True

    @property
    def should_run_one_episode(self) -> bool:
        return self.alive or not self.total_episode_count

    def run(self) -> None:
        try:
            while self.should_run_one_episode:
                self.total_environment_count += 1
                with self._make_env() as env:
                    self._patience = self._patience or env.action_space.n
                    self.run_one_environment(env)
        except Exception as exc:          # reported by random_search, which cannot see a thread's exception
            self.error = exc
            logger.exception("random search worker stopped")

    def run_one_environment(self, env: CompilerEnv) -> None:
        """Episodes on ``env`` until told to stop, or until one ends in an error (then a new environment)."""
        while self.should_run_one_episode:
            self.total_episode_count += 1
            if not self.run_one_episode(env):
                return

    def run_one_episode(self, env: CompilerEnv) -> bool:
        """One episode of random actions; False when the environment ended it with an error."""
        env.reset()
        actions: List[int] = []
        patience = self._patience
        total_returns = 0.0
        while patience >= 0:
            patience -= 1
            self.total_step_count += 1
            action = env.action_space.sample()
            actions.append(action)
            _, reward, done, _ = env.step(action)
            if done:
                return False
            total_returns += reward
            if total_returns > self.best_returns:
                patience = self._patience
                self.best_returns = total_returns
                self.best_actions = actions.copy()
                try:
                    self.best_commandline = env.commandline()
                except NotImplementedError:
                    self.best_commandline = ""
                self.best_found_at_time = time.time()
        return True


def user_logs_dir(name: str) -> Path:
    """A new folder ``LOGS/name/YYYY-MM-DD/HH-MM-SS`` (``LOGS``: ``$COMPILER_GYM_LOGS``, else
    ``~/logs/compiler_gym``), as CompilerGym's ``create_user_logs_dir``."""
    base = Path(os.environ.get("COMPILER_GYM_LOGS", "~/logs/compiler_gym")).expanduser() / name
    while True:
        folder = base / datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            time.sleep(0.3)


def random_search(make_env: Callable[[], CompilerEnv], outdir: Optional[Union[str, Path]] = None,
                  total_runtime: Optional[float] = 600, patience: int = 0, nproc: int = os.cpu_count() or 1,
                  skip_done: bool = False) -> Optional[CompilerEnv]:
    """Search for the best sequence of actions by random episodes, on ``nproc`` threads for ``total_runtime``
    seconds (None: until interrupted), then replay the best one found in a new environment and return it
    (closed). ``make_env()`` makes an environment with a reward space; ``patience`` actions without a better
    return end an episode (0: the size of the action space). ``outdir`` (default: a new folder under
    :func:`user_logs_dir`) receives the files listed in the module docstring; with ``skip_done`` a folder that
    has its ``random_search.json`` already is left as it is and None is returned.

    Raises:
        TypeError: ``make_env()`` is not a CompilerGym environment.
        ValueError: it has no reward space.
        RuntimeError: every worker failed before one episode ended.
    """
    with make_env() as env:
        env.reset()
        if not isinstance(env.unwrapped, CompilerEnv):
            raise TypeError(f"random_search() requires CompilerEnv. Called with: {type(env).__name__}")
        benchmark_uri = str(env.benchmark.uri)
        if not outdir:
            parts = urllib.parse.urlparse(benchmark_uri)
            outdir = user_logs_dir(os.path.normpath(f"random/{parts.scheme}/{parts.netloc}{parts.path}"))
        outdir = Path(outdir)
        outdir.mkdir(parents=True, exist_ok=True)
        if not env.reward_space:
            raise ValueError("A reward space must be specified for random search")
        reward_space_name = env.reward_space.name
        action_space_names = list(env.action_space.names)
        metadata_path = outdir / "random_search.json"
        if skip_done and metadata_path.is_file():
            return None
        metadata = {"env": env.spec.id if env.spec else "", "benchmark": benchmark_uri,
                    "reward": reward_space_name, "patience": patience}
        metadata_path.write_text(json.dumps(metadata, sort_keys=True, indent=2))

    workers = [RandomAgentWorker(make_env, patience) for _ in range(nproc)]
    for worker in workers:
        worker.start()
    logger.info("started %d worker threads for %s using reward %s; logs in %s", len(workers), benchmark_uri,
                reward_space_name, outdir)
    started = time.time()
    end_time = started + total_runtime if total_runtime else None
    best_actions: List[int] = []
    best_commandline = ""
    last_best_returns = -float("inf")
    try:
        with open(outdir / "random_search_progress.csv", "w") as f:
            print("runtime_seconds,total_episode_count,total_step_count,num_passes,reward", file=f, flush=True)
            while not end_time or time.time() < end_time:
                time.sleep(POLL_SECONDS)
                if all(not w.is_alive() for w in workers):
                    break
                best_worker = max(workers, key=lambda w: w.best_returns)
                best_returns = best_worker.best_returns
                best_actions, best_commandline = best_worker.best_actions, best_worker.best_commandline
                if best_returns > last_best_returns:
                    entry = RandomSearchProgressLogEntry(
                        runtime_seconds=time.time() - started,
                        total_episode_count=sum(w.total_episode_count for w in workers),
                        total_step_count=sum(w.total_step_count for w in workers),
                        num_passes=len(best_actions), reward=best_returns)
                    print(entry.to_csv(), file=f, flush=True)
                    logger.info("best reward %.4f (%d passes) after %.1f s", best_returns, len(best_actions),
                                entry.runtime_seconds)
                    last_best_returns = best_returns
    except KeyboardInterrupt:
        logger.info("keyboard interrupt")
    for worker in workers:
        worker.alive = False
    for worker in workers:
        worker.join()
    if not any(w.total_episode_count for w in workers) and any(w.error for w in workers):
        raise RuntimeError("every random search worker failed") from next(w.error for w in workers if w.error)
    best_worker = max(workers, key=lambda w: w.best_returns)
    best_actions, best_commandline = best_worker.best_actions, best_worker.best_commandline

    best_action_names = [action_space_names[a] for a in best_actions]
    (outdir / "random_search_best_actions.txt").write_text("\n".join(best_action_names) + "\n")
    (outdir / "random_search_best_actions_commandline.txt").write_text(f"{best_commandline}\n")
    with make_env() as env:
        env.reset()
        replay_actions(env, best_action_names, outdir)
    return env


def replay_actions(env: CompilerEnv, action_names: List[str], outdir: Path) -> None:
    """Take the actions named ``action_names`` on ``env`` (after its ``reset()``), logging each step's reward to
    ``outdir/random_search_best_actions_progress.csv``; an LLVM environment's module before and after goes to
    ``unoptimized.bc`` and ``optimized.bc``. RuntimeError when a step ends the episode."""
    outdir = Path(outdir)
    llvm = isinstance(env.unwrapped, LlvmEnv)
    if llvm:
        env.unwrapped.write_bitcode(outdir / "unoptimized.bc", overwrite=True)
    start_time = time.time()
    with open(outdir / "random_search_best_actions_progress.csv", "w") as f:
        episode_reward = 0.0
        for i, action in enumerate(action_names, start=1):
            _, reward, done, info = env.step(env.action_space.names.index(action))
            if done:
                raise RuntimeError(f"replaying {action} ended the episode: {info.get('error_details')}")
            episode_reward += reward
            logger.info("step [%03d / %03d]: reward=%.4f episode=%.4f action=%s", i, len(action_names), reward,
                        episode_reward, action)
            progress = RandomSearchProgressLogEntry(runtime_seconds=time.time() - start_time, total_episode_count=1,
                                                    total_step_count=i, num_passes=i, reward=reward)
            print(progress.to_csv(), action, file=f, sep=",")
    if llvm:
        env.unwrapped.write_bitcode(outdir / "optimized.bc", overwrite=True)
        observation = env.unwrapped.observation
        logger.info("IR instruction count: -O0 %d, -Oz %d, final %d", observation["IrInstructionCountO0"],
                    observation["IrInstructionCountOz"], observation["IrInstructionCount"])
        logger.info("object .text size (bytes): -O0 %d, -Oz %d, final %d", observation["ObjectTextSizeO0"],
                    observation["ObjectTextSizeOz"], observation["ObjectTextSizeBytes"])


def replay_actions_from_logs(env: CompilerEnv, logdir: Path, benchmark=None) -> None:
    """Replay the best actions that :func:`random_search` wrote to ``logdir`` on ``env`` (its reward space and
    benchmark set from the folder's ``random_search.json``; ``benchmark`` overrides the benchmark).
    FileNotFoundError when a file of the folder is missing."""
    logdir = Path(logdir)
    best_actions_path = logdir / "random_search_best_actions.txt"
    meta_path = logdir / "random_search.json"
    for path in (best_actions_path, meta_path):
        if not path.is_file():
            raise FileNotFoundError(f"File not found: {path}")
    meta = json.loads(meta_path.read_text())
    actions = [line.strip() for line in best_actions_path.read_text().splitlines() if line.strip()]
    env.reward_space = meta["reward"]
    env.reset(benchmark=benchmark or meta["benchmark"])
    replay_actions(env, actions, logdir)


__all__ = ["RandomAgentWorker", "RandomSearchProgressLogEntry", "random_search", "replay_actions",
           "replay_actions_from_logs", "user_logs_dir"]
