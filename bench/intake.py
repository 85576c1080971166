"""``bench intake``: one callback intake process, signed callbacks offered at a fixed rate.

The intake runs as its own process (``pacer-intake``) on a fresh database and the bench's
Kafka; this process offers ``BENCH_INTAKE_RATE`` callbacks a second (1,000) for
``BENCH_INTAKE_SECONDS`` (10), open loop: each is sent at its scheduled moment whether or not
earlier ones were answered (at most ``MAX_IN_FLIGHT`` outstanding). Figures: callbacks
accepted per second over the window, and that over the rate offered (``accepted_ratio``), and the ack latency (request sent → 200, which the
intake answers only once Kafka acknowledged the append, acks=all) at p50 and p99, and the
intake's own CPU time per callback (what one core's worth of intake costs, whatever else runs).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import aiohttp

from bench.common import CORES, cpu_s, env_int, real_infra, stack, teardown
from pacer_common.domain.tenants import sign
from pacer_dev.stack import LOCAL_CALLBACK_SECRET

MAX_IN_FLIGHT = 2000


async def offer(url: str, rate: int, seconds: int) -> tuple[int, list[float], int, float]:
    """(sent, latencies in s of the accepted, errors, wall seconds until the last answer)."""
    latencies: list[float] = []
    errors = 0
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)
    connector = aiohttp.TCPConnector(limit=MAX_IN_FLIGHT)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one(i: int) -> None:
            nonlocal errors
            body = json.dumps({"cmd": "message.received", "guid": f"g{i % 1000}", "ts": int(time.time() * 1000),
                               "data": {"msgUid": f"m-{i}", "fromId": f"c{i % 5000}", "content": "hi"}}).encode()
            headers = {"Content-Type": "application/json", "X-Signature": sign(LOCAL_CALLBACK_SECRET, body)}
            async with gate:
                t0 = time.perf_counter()
                try:
                    async with session.post(f"{url}/callbacks/default", data=body, headers=headers) as resp:
                        await resp.read()
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    latencies.append(time.perf_counter() - t0)
                else:
                    errors += 1

        total = rate * seconds
        start = time.perf_counter()
        tasks = []
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        return total, latencies, errors, time.perf_counter() - start


def intake() -> str:
    rate, seconds = env_int("BENCH_INTAKE_RATE", 1000), env_int("BENCH_INTAKE_SECONDS", 10)
    inf = real_infra()
    st = stack(inf, "intake", {})
    try:
        proc = st.start_intake()
        asyncio.run(offer(proc.url, 50, 1))  # warm up: connections, the producer's metadata
        cpu0 = cpu_s(proc.pid)
        sent, lat, errors, wall = asyncio.run(offer(proc.url, rate, seconds))
        cpu_us = (cpu_s(proc.pid) - cpu0) * 1e6 / max(1, sent)
    finally:
        teardown(st)
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [float("nan")] * 99
    return (f"bench intake: target_per_s={rate} seconds={seconds} sent={sent} accepted={len(lat)} errors={errors} "
            f"accepted_per_s={len(lat) / wall:.0f} accepted_ratio={len(lat) / wall / rate:.3f} "
            f"ack_p50_ms={q[49] * 1000:.1f} ack_p99_ms={q[98] * 1000:.1f} "
            f"intake_cpu_us_per_callback={cpu_us:.0f} cores={CORES}")


if __name__ == "__main__":
    print(intake())
