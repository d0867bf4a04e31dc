"""`census --ray`: the missing shards as tasks of Ray actors (Ray, not a scheduler of our own, for
a corpus or a model that outgrows one machine). Each actor opens the model once and returns each
shard's numbers to this process, which writes the shard file as the local engine does: the same
shards, the same files and the same merge on every engine, so the result does not depend on
where it ran. ``--ray-address ADDR`` (else ``RAY_ADDRESS``, else a local Ray started for the run).
Ray is an optional extra: ``pip install 'attn-cli[ray]'``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_cli.runtime.errors import UsageError

if TYPE_CHECKING:
    from attn_cli.sources.census import Windows
    from attn_cli.sources.spec import SourceSpec
    from attn_cli.text.corpus import Corpus


IN_FLIGHT = 2  # shards queued on each actor: the next starts as one ends, not after its numbers reach this process


class ShardActor:
    """One Ray actor: the model (and --against's) opened once, a shard's numbers per call."""

    def __init__(self, spec: SourceSpec, corpus: Corpus, shards: Any, windows: Windows | None, epsilon: float, against: Any) -> None:
        from attn_cli.pipeline import open_source

        self.source, self.corpus, self.shards, self.windows, self.epsilon = open_source(spec), corpus, shards, windows, epsilon
        self.against = None if against is None else open_source(against)

    def run(self, k: int) -> tuple[int, str]:
        """Shard ``k``: (k, its file's text)."""
        from attn_cli.cli.census_workers import one_shard
        from attn_cli.formats.census import shard_dict

        made = one_shard(self.source, self.corpus, self.shards.shards[k], self.windows, self.epsilon, None, self.against)
        return k, json.dumps({**shard_dict(made.tally, self.shards.shards[k], made.model), "cut": made.cut})


def in_ray(
    spec: SourceSpec, corpus: Corpus, shards: Any, missing: Sequence[int], *, windows: Windows | None, epsilon: float,
    workers: int | None, progress: Callable[[int, int], None], against: SourceSpec | None = None, address: str | None = None,
) -> None:  # fmt: skip
    """Run the ``missing`` shards on Ray: ``workers`` actors (default: the cluster's CPUs), each
    shard written here as it comes back."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'attn-cli[ray]' (or run on this machine with --workers N)") from None
    from attn_cli.cli.census_workers import environ_threads
    from attn_cli.runtime.files import write_atomic

    started = not ray.is_initialized()
    if started:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):  # Ray's start-up lines; said only if the start fails
                ray.init(address=address or os.environ.get("RAY_ADDRESS") or None, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR, configure_logging=False)  # fmt: skip
        except Exception as err:  # Ray's own errors: no cluster at the address, a version mismatch
            raise UsageError(f"--ray: Ray did not start ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    try:
        count = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        actor = ray.remote(num_cpus=1, runtime_env={"env_vars": environ_threads(count)})(ShardActor)
        actors = [actor.remote(spec, corpus, shards, windows, epsilon, against) for _ in range(min(count, len(missing)))]
        waiting, pending = list(missing), {}
        for _ in range(IN_FLIGHT):
            for each in actors:
                if waiting:
                    pending[each.run.remote(waiting.pop(0))] = each
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            each = pending.pop(ref)
            k, text = ray.get(ref)
            write_atomic(Path(shards.path(k)), text.encode("utf-8"))
            progress(len(shards.shards[k]), json.loads(text)["tokens"])
            if waiting:
                pending[each.run.remote(waiting.pop(0))] = each
    finally:
        if started:
            ray.shutdown()
