"""A GRPO-style rollout loop on aenv's native API (`aenv_client`).

GRPO scores a *group* of attempts at the same task state against each other: every attempt's
advantage is its reward minus the group's mean, over the group's standard deviation. Sandboxes
make the "same task state" cheap: set one sandbox up once, fork it into a group of
copy-on-write children, let the policy act in each, read the rewards, and rewind the children
to the task state (reset) for the next iteration instead of setting up again.

    parent  --setup-->  task state --snapshot--> S
       |--fork x16--> child 1 .. child 16      (one call, one result per child; the
                                                children it could not make asked for again)
    per iteration:  exec the policy's action in every child -> reward (a file the task's
                    grader writes, or its exit code) -> advantages; then reset each child to S
    at the end:     kill the children and the parent, delete S

An infrastructure failure — a sandbox that died (`SandboxDied`), a node that did not answer, a
child the fork could not make — is never a zero reward: the attempt is left out of its group
(and would be retried by a real trainer), so a flaky machine cannot teach the policy anything.
A zero comes only from the task itself: the grader's verdict, an action it rejects (a non-zero
exit), or an action that ran past its time limit.

Run it against a platform started by `aenv up` (its gRPC address and API key):

    python examples/grpo_rollout.py --target 127.0.0.1:50051 --api-key "$AENV_API_KEY"

It prints one JSON object: per iteration, each attempt's action and reward (or its failure),
and the group's advantages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
from dataclasses import asdict, dataclass

from aenv_client import (
    AenvError,
    DeadlineExceeded,
    GatewayClient,
    SandboxDied,
)

# The default user's own: envd and processes act as that user, who may not write under /opt.
TASK_DIR = "/home/user/task"
# The task: find the hidden number. The grader scores a guess by its distance and writes the
# reward where the trainer reads it; a guess that is not a number is rejected (exit 2).
GRADER = b"""\
import json, sys
secret = int(open("/home/user/task/secret").read())
try:
    guess = int(sys.argv[1])
except (IndexError, ValueError):
    sys.exit(2)
reward = max(0.0, 1.0 - abs(guess - secret) / 100)
json.dump({"reward": reward}, open("/home/user/task/reward.json", "w"))
print("guess", guess, "reward", reward)
"""
# Reaching the task state: what a real task does once (install, clone, build) before any
# attempt. Here: the grader in place, and a secret drawn inside the sandbox.
SETUP = (
    f"mkdir -p {TASK_DIR} && cd {TASK_DIR} && "
    "python3 -c 'import random; print(random.randint(0, 100))' > secret && "
    "python3 -m py_compile grader.py && echo ready"
)
STEP_TIMEOUT_S = 60


@dataclass
class Attempt:
    sandbox_id: str
    action: str
    # None: no reward, because the infrastructure failed (see `failure`); never scored.
    reward: float | None = None
    failure: str = ""


def policy(rng: random.Random) -> str:
    """The policy being trained: here a random guesser (an LLM's sampled action in practice)."""
    return str(rng.randint(0, 100))


async def set_up(client: GatewayClient, sandbox_id: str) -> None:
    await client.put_file(sandbox_id, f"{TASK_DIR}/grader.py", GRADER)
    done = await client.run(sandbox_id, SETUP, timeout_seconds=STEP_TIMEOUT_S)
    if done.exit_code != 0:
        raise RuntimeError(f"setup failed: {done.stderr.decode(errors='replace')}")


async def attempt(client: GatewayClient, sandbox_id: str, action: str) -> Attempt:
    """One policy step in one sandbox and its reward."""
    result = Attempt(sandbox_id, action)
    try:
        step = await client.exec(
            sandbox_id, "python3", [f"{TASK_DIR}/grader.py", action], timeout_seconds=STEP_TIMEOUT_S
        )
        async with step:
            ended = await step.wait()
        if ended.exit_code != 0:
            result.reward = 0.0  # the task rejected the action: a real zero
            return result
        answer = json.loads(await client.get_file(sandbox_id, f"{TASK_DIR}/reward.json"))
        result.reward = float(answer["reward"])
    except DeadlineExceeded:
        result.reward = 0.0  # the action ran past the task's time limit: the policy's doing
    except SandboxDied as died:
        result.failure = f"sandbox died: {died.message}"
    except AenvError as err:
        result.failure = f"{type(err).__name__}: {err.message}"
    return result


def advantages(attempts: list[Attempt]) -> list[float | None]:
    """GRPO's group-relative advantages, over the attempts that have a reward."""
    rewards = [a.reward for a in attempts if a.reward is not None]
    if not rewards:
        return [None] * len(attempts)
    mean = statistics.fmean(rewards)
    spread = statistics.pstdev(rewards) or 1.0
    return [None if a.reward is None else (a.reward - mean) / spread for a in attempts]


async def rewind(client: GatewayClient, sandbox_ids: list[str], snapshot_id: str) -> list[str]:
    """The sandboxes back at the task state; ones that cannot be rewound are dropped."""

    async def one(sandbox_id: str) -> str | None:
        try:
            await client.reset_sandbox(sandbox_id, snapshot_id)
            return sandbox_id
        except AenvError as err:
            print(f"dropping {sandbox_id}: {err.message}", file=sys.stderr)
            return None

    return [s for s in await asyncio.gather(*map(one, sandbox_ids)) if s is not None]


async def fork_group(
    client: GatewayClient, parent_id: str, group: int, children: list[str], tries: int = 3
) -> list[AenvError]:
    """`group` children of the task state (added to `children` as they are made, so a failure
    leaves none unkilled), in one call; children the node could not make (an infrastructure
    failure: no room, a restore that timed out) are asked for again, up to `tries` calls in
    all. Returns the errors of those still missing."""
    missing: list[AenvError] = []
    for _ in range(tries):
        outcomes = await client.fork_sandbox(parent_id, group - len(children), timeout_seconds=1800)
        children += [o.sandbox_id for o in outcomes if not isinstance(o, AenvError)]
        missing = [o for o in outcomes if isinstance(o, AenvError)]
        if not missing:
            break
        print(f"{len(missing)} children not made ({missing[0].message}); again", file=sys.stderr)
    return missing


async def rollout(
    client: GatewayClient, template: str, group: int, iterations: int, seed: int
) -> dict[str, object]:
    rng = random.Random(seed)
    parent = await client.create_sandbox(
        template, timeout_seconds=1800, metadata={"example": "grpo"}
    )
    children: list[str] = []
    snapshot_id = ""
    try:
        await set_up(client, parent.sandbox_id)
        snapshot_id = (await client.create_snapshot(parent.sandbox_id, "task-state")).snapshot_id
        lost = await fork_group(client, parent.sandbox_id, group, children)
        active = list(children)
        report: list[dict[str, object]] = []
        for iteration in range(iterations):
            if iteration:
                active = await rewind(client, active, snapshot_id)
            actions = [policy(rng) for _ in active]
            steps = (attempt(client, c, a) for c, a in zip(active, actions, strict=True))
            attempts = list(await asyncio.gather(*steps))
            attempts += [Attempt("", "", None, f"fork failed: {err.message}") for err in lost]
            lost = []  # reported once
            report.append(
                {
                    "attempts": [asdict(a) for a in attempts],
                    "advantages": advantages(attempts),
                    "infrastructure_failures": sum(a.reward is None for a in attempts),
                }
            )
        return {"parent": parent.sandbox_id, "snapshot": snapshot_id, "iterations": report}
    finally:
        await _clean_up(client, [*children, parent.sandbox_id], snapshot_id)


async def _clean_up(client: GatewayClient, sandbox_ids: list[str], snapshot_id: str) -> None:
    async def kill(sandbox_id: str) -> None:
        try:
            await client.kill_sandbox(sandbox_id)
        except AenvError:
            pass  # gone already (a died child)

    await asyncio.gather(*map(kill, sandbox_ids))
    if snapshot_id:
        await client.delete_snapshot(snapshot_id)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target",
        default=os.environ.get("AENV_GRPC", "127.0.0.1:50051"),
        help="the gateway's gRPC address (env AENV_GRPC)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("AENV_API_KEY", ""),
        help="an API key of the platform (env AENV_API_KEY)",
    )
    parser.add_argument("--template", default="base")
    parser.add_argument("--group", type=int, default=16, help="attempts per task state")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    async with GatewayClient(args.target, args.api_key, timeout_s=600) as client:
        report = await rollout(client, args.template, args.group, args.iterations, args.seed)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
