"""``caramba serve``: the HTTP API and web UI in one process (127.0.0.1 unless told otherwise)."""

from __future__ import annotations

import typer


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int):
    """A listening socket on host:port, or a ConfigError saying why not (a port in use, an
    address this machine does not have, a privileged port)."""
    import errno
    import socket

    from caramba.errors import ConfigError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = {errno.EADDRINUSE: "the port is in use (another caramba serve?)",
               errno.EADDRNOTAVAIL: "this machine has no such address",
               errno.EACCES: "this user may not bind it (ports below 1024 need privileges)"}.get(exc.errno,
                                                                                               exc.strerror or str(exc))
        raise ConfigError(f"cannot listen on {host}:{port}: {why}",
                          hint="pick another --port (0 picks a free one) or --host") from None
    except OverflowError as exc:  # a port past 65535
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc}", hint="check --host and --port") from None
    return sock


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: str = typer.Option(None, help="address to bind (default: serve_host, 127.0.0.1)"),
        port: int = typer.Option(None, help="port (default: serve_port, 8765; 0 picks a free one)"),
        store: str = typer.Option(None, help="run store folder or URL (file://..., s3://bucket/prefix; default: the store setting)"),
        token: str = typer.Option(
            None, envvar="CARAMBA_API_TOKEN", show_envvar=True,
            help="secret for state-changing calls (default: api_token; generated when unset)",
        ),
        config: str = typer.Option(None, "--config", help="config file"),
        workers: int = typer.Option(1, min=1, max=64, help="runs that may execute at the same time (others queue)"),
        log_level: str = typer.Option("warning", help="uvicorn log level"),
    ) -> None:
        """Serve the HTTP API under /api/v1 and the web UI at /."""
        import uvicorn
        from rich.console import Console

        from caramba.api.app import create_app
        from caramba.api.auth import new_token
        from caramba.config import load_settings

        settings = load_settings(config, {"serve_host": host, "serve_port": port, "store": store})
        console = Console(stderr=True, highlight=False)
        secret = token or settings.api_token
        generated = not secret
        if generated:
            secret = new_token()
        host, port = settings.serve_host, settings.serve_port
        if not _is_loopback(host):
            console.print(f"[yellow]warning:[/] binding {host}, which is reachable from other machines")
            if not settings.serve_allowed_hosts:
                console.print("  requests must name this server in their Host header: only the bound address and "
                              "localhost are answered (421 otherwise); list the names clients use in the "
                              "serve_allowed_hosts setting (CARAMBA_SERVE_ALLOWED_HOSTS=name1,name2)")
        sock = _listen(host, port)  # connections queue from here on, so the URL printed below works at once
        port = sock.getsockname()[1]
        app = create_app(settings, token=secret, workers=workers)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}/"
        print(f"caramba serving {url} (API {url}api/v1, store {app.state.caramba.store_root})", flush=True)
        if generated:
            # The fragment never reaches the server or its logs; the UI stores it in the browser.
            print(f"api token (generated for this process): {secret}", flush=True)
            print(f"open {url}#token={secret}", flush=True)
        server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5))
        server.run(sockets=[sock])
