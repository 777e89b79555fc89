"""`kbuild hub serve`: the local Hub-compatible server, for offline work and private CI."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core.errors import BuildError
from .app import command_group, log

hub_app = command_group("hub", "A local Hub-compatible server on 127.0.0.1.")


@hub_app.command("serve")
def serve(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1; 0 picks a free one.")] = 8080,
    token: Annotated[Optional[str], typer.Option(
        help="Require this bearer token for writes and private reads (HF_TOKEN of the clients).")] = None,
    read_token: Annotated[Optional[str], typer.Option(
        help="Also accept this token, for reads only (private repos too); writes with it get 403. "
             "Needs --token.")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(
        help="Keep the repositories here across restarts; default: in memory only.")] = None,
) -> None:
    """Serve the Hub's HTTP API so `upload`, `to-wheel --repo-id` and `kernels.get_kernel` work
    against it: export the printed HF_ENDPOINT in the clients' shell."""
    from kbuild_hub import HubServer
    from kbuild_hub.server import token_problem

    for option, value in (("--token", token), ("--read-token", read_token)):
        if token_problem(option, value):
            raise BuildError(token_problem(option, value), hint="pass the token the clients use "
                             "as HF_TOKEN, or leave --token out for a server that checks none")
    if read_token is not None and token is None:
        raise BuildError("--read-token needs --token: without a write token this server checks no "
                         "token at all", hint="pass --token as well")
    if read_token is not None and read_token == token:
        raise BuildError("--read-token must differ from --token", hint="pick another read token")
    server = HubServer(token=token, read_token=read_token, data_dir=data_dir, port=port).start()
    log("Local Hub: run these in the shell of the clients (kbuild upload, kernels, hf):")
    log(f"  export HF_ENDPOINT={server.url}")
    log(f"  export HF_TOKEN={token}" if token else
        "  export HF_TOKEN=local    # any value: this server checks no token")
    if read_token:
        log(f"  (or HF_TOKEN={read_token} for clients that only read)")
    log("serving " + (f"with the repositories in {data_dir}" if data_dir else "from memory")
        + "; Ctrl-C stops")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        log("stopped")
    finally:
        server.stop()
