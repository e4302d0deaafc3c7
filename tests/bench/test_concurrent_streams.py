"""The P12 benchmark's arithmetic and table (bench/concurrent_streams.py), from made-up timestamps: no
servers, no model."""

from __future__ import annotations

from typing import Any

import pytest

from bench.concurrent_streams import (
    CLIENTS,
    MODES,
    Stream,
    aggregate_tok_s,
    prompts_for,
    render_table,
    summarise,
    summary,
    wall_s,
)


def stream(sent: float, first: float, last: float, ended: float, tokens: int = 128) -> Stream:
    return Stream(sent, first, last, ended, tokens, "usage", "length")


def test_a_streams_own_rate_is_tokens_after_the_first_over_the_time_after_it() -> None:
    s = stream(10.0, 10.5, 12.0, 12.1, tokens=31)
    assert s.ttft_s == pytest.approx(0.5)
    assert s.tok_s == pytest.approx(30 / 1.5)


def test_a_stream_without_text_or_with_one_token_has_no_rate() -> None:
    assert Stream(0.0, None, None, 1.0, 0, "chunks").tok_s is None
    assert Stream(0.0, None, None, 1.0, 0, "chunks").ttft_s is None
    assert stream(0.0, 0.5, 0.5, 0.6, tokens=1).tok_s is None


def test_the_aggregate_is_every_token_over_first_sent_to_last_ended() -> None:
    # One after another: 4 × 100 tokens in 2 s each, back to back.
    one_by_one = [stream(2.0 * i, 2.0 * i + 0.1, 2.0 * i + 1.9, 2.0 * (i + 1), 100) for i in range(4)]
    assert wall_s(one_by_one) == pytest.approx(8.0)
    assert aggregate_tok_s(one_by_one) == pytest.approx(50.0)
    # At once: the same tokens, sent together, the last ending after 3 s.
    together = [stream(0.0, 0.2, 2.5 + i * 0.1, 2.7 + i * 0.1, 100) for i in range(4)]
    assert aggregate_tok_s(together) == pytest.approx(400 / 3.0)
    row = summarise(together)
    assert row["tokens"] == [100] * 4 and row["counted"] == ["usage"]
    assert row["ttft_s"] == pytest.approx([0.2] * 4)
    assert row["stream_tok_s"][0] == pytest.approx(99 / 2.3)


def rounds_for(server: str, sequential: float, concurrent: float, round_no: int) -> list[dict[str, Any]]:
    rates = {"sequential": sequential, "single": sequential, "concurrent": concurrent}
    return [
        {
            "round": round_no,
            "server": server,
            "mode": mode,
            "position": position,
            "wall_s": 1.0,
            "aggregate_tok_s": rates[mode],
            "tokens": [128] * (1 if mode == "single" else CLIENTS),
            "stream_tok_s": [rates[mode] / (1 if mode != "concurrent" else CLIENTS)],
            "ttft_s": [0.05 if mode != "concurrent" else 0.2],
            "finish_reasons": ["length"],
            "counted": ["usage"],
        }
        for position, mode in enumerate(MODES, 1)
    ]


def test_the_ratio_is_taken_per_round_then_the_median() -> None:
    measured = [
        *rounds_for("hearth", 100.0, 250.0, 1),
        *rounds_for("hearth", 50.0, 150.0, 2),
        *rounds_for("hearth", 100.0, 200.0, 3),
    ]
    out = summary(measured, ["hearth"])["hearth"]
    assert out["ratios"] == pytest.approx([2.5, 3.0, 2.0])
    assert out["ratio"] == pytest.approx(2.5)
    assert out["sequential"]["aggregate_tok_s"] == pytest.approx(100.0)
    assert out["concurrent"]["aggregate_tok_s"] == pytest.approx(200.0)
    assert out["concurrent"]["ttft_s"] == pytest.approx(0.2)
    assert out["min_tokens"] == out["max_tokens"] == 128


def test_every_request_is_new_yet_the_same_on_every_server() -> None:
    seen = [p for number in (1, 2) for mode in MODES for p in prompts_for(number, mode)]
    assert len(seen) == len(set(seen)) == 2 * len(MODES) * CLIENTS
    assert prompts_for(2, "concurrent") == prompts_for(2, "concurrent")


def data(**changes: Any) -> dict[str, Any]:
    measured = [*rounds_for("hearth", 80.0, 180.0, 1), *rounds_for("llama_cpp_python", 90.0, 88.0, 1)]
    base: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "threads": 2,
        "max_tokens": 128,
        "clients": CLIENTS,
        "n_ctx_per_sequence": 2048,
        "target": 2.0,
        "servers": [
            {"name": "hearth", "parallel_slots": 4, "cpu_kernels": "haswell"},
            {"name": "llama_cpp_python", "parallel": 1},
        ],
        "skipped": {"llama_server": "no llama-server binary"},
        "rounds": measured,
        "summary": summary(measured, ["hearth", "llama_cpp_python"]),
    }
    return {**base, **changes}


def test_the_table_has_a_row_per_server_and_says_whether_the_bar_is_met() -> None:
    table = render_table(data())
    assert "| Hearth local API (4 slots) | 80.0, 50 ms | 80.0 | 180.0 | 45.0, 200 ms | **×2.25** |" in table
    assert "| llama-cpp-python server (one request at a time) | 90.0, 50 ms | 90.0 | 88.0 |" in table
    assert "CPU (haswell kernels), 2 threads, context 2,048 per sequence" in table
    assert "every reply ran to 128 tokens" in table
    assert "Target ≥ ×2 for Hearth: met." in table
    assert "llama.cpp llama-server was not measured: no llama-server binary." in table


def test_the_table_of_a_hearth_without_slots_says_so_and_misses_the_bar() -> None:
    measured = rounds_for("hearth", 80.0, 82.0, 1)
    table = render_table(
        data(
            servers=[{"name": "hearth", "parallel_slots": None}],
            skipped={},
            rounds=measured,
            summary=summary(measured, ["hearth"]),
        )
    )
    assert "| Hearth local API (before parallel slots) |" in table
    assert "Target ≥ ×2 for Hearth: not met." in table and "not measured" not in table


def test_the_table_names_each_servers_cpu_kernels_when_they_differ() -> None:
    servers = [
        {"name": "hearth", "parallel_slots": 4, "cpu_kernels": "zen4"},
        {"name": "llama_cpp_python", "parallel": 1},
    ]
    assert "CPU (zen4 kernels)" in render_table(data(servers=servers))
    servers[1] = {"name": "llama_server", "parallel": 4, "cpu_kernels": "haswell"}
    measured = [*rounds_for("hearth", 80.0, 180.0, 1), *rounds_for("llama_server", 90.0, 300.0, 1)]
    table = render_table(
        data(servers=servers, rounds=measured, summary=summary(measured, ["hearth", "llama_server"]))
    )
    assert "CPU (Hearth local API: zen4, llama.cpp llama-server: haswell kernels)" in table
    assert (
        "| llama.cpp llama-server (-np 4) | 90.0, 50 ms | 90.0 | 300.0 | 75.0, 200 ms | **×3.33** |" in table
    )


def with_prompts(rows: list[dict[str, Any]], *counts: int) -> list[dict[str, Any]]:
    return [{**row, "prompt_tokens": list(counts[: len(row["tokens"])])} for row in rows]


def test_the_table_says_whether_every_server_read_prompts_of_the_same_length() -> None:
    same = [
        *with_prompts(rounds_for("hearth", 80.0, 180.0, 1), 58, 59, 58, 60),
        *with_prompts(rounds_for("llama_cpp_python", 90.0, 88.0, 1), 58, 59, 58, 60),
    ]
    table = render_table(data(rounds=same, summary=summary(same, ["hearth", "llama_cpp_python"])))
    assert "Each request's prompt: 58–60 tokens on every server." in table
    # Another template (a default system prompt left out) is a longer wait for the first token on one side.
    other = [*same[:3], *with_prompts(rounds_for("llama_cpp_python", 90.0, 88.0, 1), 31, 32, 31, 33)]
    table = render_table(data(rounds=other, summary=summary(other, ["hearth", "llama_cpp_python"])))
    counts = "as each server counts them: Hearth local API 58–60; llama-cpp-python server 31–33."
    assert counts in table
    # Older results have no counts: nothing is said.
    assert "Prompt tokens" not in render_table(data()) and "Each request's prompt" not in render_table(data())
