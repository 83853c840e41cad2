"""A lost node of a cluster, seen by the entrypoint of another node: it stops its own vLLM at once and
exits with EXIT_RANK, naming the rank, so the restart policy starts it again to meet the others anew
(vLLM's ranks do not rejoin a running job, and a rank left waiting on a dead peer may hang for good).

The head reads it in vLLM's output (RankWatch.judge, fed every line as the start summary is): the lines
vLLM 0.33.0, and torch.distributed and NCCL under it, print when another rank is gone. A worker also
watches the head's rendezvous port (`worker_watchdog`): a headless rank waits for the head's next call
and prints nothing when the head dies. On one node none of this applies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkserve.serving import cluster
from sparkserve.serving.preflight import EXIT_RANK
from sparkserve.serving.supervise import Verdict, Watchdog

# The worker's watchdog asks more often than the head's /health one: a head that restarts must not be
# back on its port before the worker noticed that it was gone (vLLM's start takes minutes; its
# rendezvous opens after its imports, tens of seconds in).
WORKER_INTERVAL_S = 5.0
WORKER_FAILURES = 3
WORKER_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Sign:
    """An output line that means another rank is gone, and what it says of that rank."""

    pattern: re.Pattern[str]
    says: str


SIGNS = (
    # vllm/v1/executor/multiproc_executor.py, MultiprocExecutor.collective_rpc: the engine waited
    # VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS for a rank's reply (a dead rank's never comes); the engine core
    # then dies ("EngineCore encountered a fatal error.") with this TimeoutError.
    Sign(re.compile(r"RPC call to \S+ timed out"), "did not answer the engine's call"),
    # vllm/distributed/device_communicators/pynccl_wrapper.py, NCCL_CHECK ("NCCL error: " + NCCL's own
    # words for ncclRemoteError); torch's NCCL process-group watchdog reports the same words.
    Sign(re.compile(r"remote process exited or there was a network error"),
         "left the collective (NCCL: remote process exited or there was a network error)"),
    # torch.distributed's TCPStore on the head, at the start: the rendezvous waited for the other ranks.
    Sign(re.compile(r"Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined"),
         "did not join the rendezvous"),
    # torch.distributed's store client on a worker, at the start: the head's rendezvous never answered.
    Sign(re.compile(r"The client socket has timed out after \S+ while trying to connect to"),
         "did not open its rendezvous"),
    # gloo (torch's CPU collectives: vLLM's CPU group between the ranks): a peer's end closed.
    Sign(re.compile(r"Connection closed by peer"), "closed its connection (gloo)"),
)


def _shown(line: str) -> str:
    line = line.strip()
    return line if len(line) <= 200 else line[:197] + "..."


@dataclass(frozen=True)
class RankWatch:
    """The judge of one node's vLLM output: this node's rank among `nnodes`."""

    nnodes: int
    rank: int

    def judge(self, line: str) -> Verdict | None:
        for sign in SIGNS:
            if sign.pattern.search(line):
                lost = cluster.others(self.nnodes, self.rank)
                return Verdict(EXIT_RANK, f"cluster: lost {lost}: it {sign.says} (vLLM on node rank "
                                          f"{self.rank} printed: {_shown(line)})")
        return None


def worker_watchdog(url: str) -> Watchdog:
    """A worker's watchdog: the head's rendezvous (tcp://MASTER_ADDR:MASTER_PORT); once it has answered,
    its loss ends the worker with EXIT_RANK."""
    return Watchdog(url, WORKER_INTERVAL_S, WORKER_FAILURES, WORKER_TIMEOUT_S, code=EXIT_RANK,
                    what="cluster: lost node rank 0 (the head): its rendezvous")
