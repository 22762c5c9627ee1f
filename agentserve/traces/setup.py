"""An Ingress replica's request trace writer, from ServeArgs (None when traces are off)."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from pathlib import Path
from typing import Mapping

from agentserve.config import ServeArgs
from agentserve.state import data_dir
from agentserve.traces.blocks import trace_salt
from agentserve.traces.writer import RequestTraceWriter

logger = logging.getLogger("ray.serve")


def trace_path(args: ServeArgs, env: Mapping[str, str] = os.environ) -> Path:
    """This replica's file: `<directory>/requests-<host>-<pid>.jsonl` (one per Ingress replica process, so
    replicas never share a file; default directory `<state data dir>/traces`)."""
    spec = args.request_traces
    directory = Path(spec.directory).expanduser() if spec.directory else data_dir(args.state, env) / "traces"
    return directory / f"requests-{socket.gethostname()}-{os.getpid()}.jsonl"


def open_request_traces(args: ServeArgs, env: Mapping[str, str] = os.environ) -> RequestTraceWriter | None:
    spec = args.request_traces
    if not spec.enabled:
        return None
    if args.secret_key:
        salt = trace_salt(args.secret_key)
    else:  # only outside a deployment (the Ingress always has its key): hashes then join within this process only
        logger.warning("request traces: no secret key, block hashes are salted for this process only")
        salt = secrets.token_bytes(32)
    path = trace_path(args, env)
    logger.info("request traces: writing %s", path)
    return RequestTraceWriter(
        path, salt=salt, max_bytes_per_file=spec.max_bytes_per_file, keep_files=spec.keep_files,
        max_pending_bytes=spec.max_pending_bytes,
    )
