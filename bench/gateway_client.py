"""Throughput of candidate gateway clients against the fake gateway, on loopback.

Starts ``pacer-fake-gateway`` at zero latency on a free port, then sends N
sendText requests at fixed concurrency with (a) plain ``httpx.AsyncClient``,
(b) ``httpx.AsyncClient`` over ``httpx_aiohttp.AiohttpTransport``, (c) a bare
``aiohttp.ClientSession`` as the ceiling and (d) Pacer's own send
(``pacer_common.gateway.GatewayClient.send_text``: the aiohttp session directly, with the
deadline check, the trace span and headers, the latency metric and the answer's mapping). Besides req/s it reports the client's
CPU time per request (independent of how fast the server is) and the server's
CPU use (near 100% means the server, not the client, set the pace).

Usage: python bench/gateway_client.py [--requests 5000] [--concurrency 50]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import httpx
import httpx_aiohttp

from pacer_dev.fakegateway.main import speedups
from pacer_dev.fakegateway.process import start_fake_gateway, stop

SendFn = Callable[[int], Awaitable[int]]
RUN_DEADLINE_S = 120.0
CLIENTS = ("httpx_plain", "httpx_aiohttp", "aiohttp_bare", "pacer_send")


@dataclass
class RunResult:
    rps: float
    client_cpu_us_per_req: float
    server_cpu_pct: float | None
    errors: int

    @property
    def server_cpu_us_per_req(self) -> float | None:
        if self.server_cpu_pct is None:
            return None
        return 1e6 * (self.server_cpu_pct / 100.0) / self.rps


def _proc_cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _payload(i: int) -> tuple[dict[str, str], dict[str, str]]:
    body = {"guid": f"g{i % 500}", "toId": f"user{i}", "content": f"bench message {i}"}
    return body, {"X-Idempotency-Key": f"bench-{i}"}


async def _drive(send_one: SendFn, total: int, concurrency: int, server_pid: int) -> RunResult:
    counter = iter(range(total))
    errors = 0

    async def worker() -> None:
        nonlocal errors
        for i in counter:
            if await send_one(i) != 0:
                errors += 1

    server_cpu0 = _proc_cpu_seconds(server_pid)
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), RUN_DEADLINE_S)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    server_cpu1 = _proc_cpu_seconds(server_pid)
    server_pct = None
    if server_cpu0 is not None and server_cpu1 is not None:
        server_pct = 100.0 * (server_cpu1 - server_cpu0) / elapsed
    return RunResult(total / elapsed, 1e6 * cpu / total, server_pct, errors)


async def _bench_httpx(url: str, args: argparse.Namespace, pid: int, aiohttp_transport: bool) -> RunResult:
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    transport = httpx_aiohttp.AiohttpTransport(limits=limits) if aiohttp_transport else None
    async with httpx.AsyncClient(base_url=url, limits=limits, transport=transport, timeout=10.0) as client:

        async def send_one(i: int) -> int:
            body, headers = _payload(i)
            resp = await client.post("/message/sendText", json=body, headers=headers)
            return int(resp.json()["code"]) if resp.status_code == 200 else -1

        await _drive(send_one, args.warmup, args.concurrency, pid)
        return await _drive(send_one, args.requests, args.concurrency, pid)


async def _bench_aiohttp(url: str, args: argparse.Namespace, pid: int) -> RunResult:
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=10.0)
    async with aiohttp.ClientSession(base_url=url, connector=connector, timeout=timeout) as session:

        async def send_one(i: int) -> int:
            body, headers = _payload(i)
            async with session.post("/message/sendText", json=body, headers=headers) as resp:
                return int((await resp.json())["code"]) if resp.status == 200 else -1

        await _drive(send_one, args.warmup, args.concurrency, pid)
        return await _drive(send_one, args.requests, args.concurrency, pid)


async def _bench_pacer(url: str, args: argparse.Namespace, pid: int) -> RunResult:
    from prometheus_client import CollectorRegistry

    from pacer_common.domain.failures import DEFAULT_CODE_TABLE
    from pacer_common.gateway import GatewayClient, make_client
    from pacer_common.metrics import gateway_latency

    client = make_client(url, 10.0, max_connections=args.concurrency)
    gw = GatewayClient(client, DEFAULT_CODE_TABLE, observe=gateway_latency(CollectorRegistry()))
    try:

        async def send_one(i: int) -> int:
            body, headers = _payload(i)
            receipt = await gw.send_text(body["guid"], body["toId"], body["content"], headers["X-Idempotency-Key"],
                                         deadline=time.monotonic() + 10)
            return receipt.code

        await _drive(send_one, args.warmup, args.concurrency, pid)
        return await _drive(send_one, args.requests, args.concurrency, pid)
    finally:
        await client.aclose()


async def _reset(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=5.0) as client:
        (await client.post("/_admin/reset")).raise_for_status()


async def _run_all(url: str, args: argparse.Namespace, pid: int) -> dict[str, RunResult]:
    runs = {
        "httpx_plain": lambda: _bench_httpx(url, args, pid, aiohttp_transport=False),
        "httpx_aiohttp": lambda: _bench_httpx(url, args, pid, aiohttp_transport=True),
        "aiohttp_bare": lambda: _bench_aiohttp(url, args, pid),
        "pacer_send": lambda: _bench_pacer(url, args, pid),
    }
    results: dict[str, RunResult] = {}
    for name, run in runs.items():
        if name not in args.clients:
            continue
        await _reset(url)
        results[name] = await run()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=250)
    parser.add_argument(
        "--clients",
        nargs="+",
        choices=CLIENTS,
        default=list(CLIENTS),
        help="which clients to run (default: all)",
    )
    args = parser.parse_args()

    url, proc = start_fake_gateway(latency_ms=0)
    try:
        results = asyncio.run(_run_all(url, args, proc.pid))
    finally:
        stop(proc)

    fields = [f"cores={os.cpu_count()}"]
    fields += [f"{name}_rps={r.rps:.0f}" for name, r in results.items()]
    if "httpx_aiohttp" in results and "aiohttp_bare" in results:
        ratio = results["httpx_aiohttp"].rps / results["aiohttp_bare"].rps
        fields.append(f"ratio_aiohttp_transport_vs_bare={ratio:.2f}")
    if "aiohttp_bare" in results:  # every other client against the ceiling
        fields += [f"ratio_{name}_vs_bare={results[name].rps / results['aiohttp_bare'].rps:.2f}"
                   for name in ("httpx_plain", "pacer_send") if name in results]
    fields += [f"{name}_client_cpu_us_per_req={r.client_cpu_us_per_req:.0f}" for name, r in results.items()]
    fields += [
        f"{name}_server_cpu_pct={r.server_cpu_pct:.0f}"
        for name, r in results.items()
        if r.server_cpu_pct is not None
    ]
    fields += [
        f"{name}_server_cpu_us_per_req={r.server_cpu_us_per_req:.0f}"
        for name, r in results.items()
        if r.server_cpu_us_per_req is not None
    ]
    fields.append(f"errors={sum(r.errors for r in results.values())}")
    server = speedups()
    fields.append(f"server_stack={server['http']}+{server['loop']}")
    # httpcore imports sniffio on every lock set-up; without it each import fails afresh.
    fields.append(f"sniffio={int(importlib.util.find_spec('sniffio') is not None)}")
    print("bench gateway-client: " + " ".join(fields), flush=True)


if __name__ == "__main__":
    main()
