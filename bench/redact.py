"""What masking secrets costs a streamed answer: a micro-benchmark (timeit).

Run: .venv/bin/python bench/redact.py [--chars 2000] [--delta 4] [--repeat 15]

One answer of ``--chars`` characters streamed in ``--delta``-character
content deltas, one SSE frame each, through the model's per-event path
without the HTTP: the SSE text decoded, each event's data masked
(``Redactor.text``), parsed and accumulated, then (``masked``) the deltas
masked on the assembled text (``StreamMasker``) and the final answer masked
(``Redactor.response``). The redactor is the one ``OpenAICompatibleModel``
builds for an API key. Three texts:

- ``plain``: English text; no delta ends in a possible key start but by
  chance (the common case: nothing is held back);
- ``s-ends``: every delta ends in "s", the key's first character, so every
  one is held back until the next (close to the worst case for real keys);
- ``quoting``: the key quoted every 100 characters.

Prints microseconds per answer, the best of ``--repeat`` interleaved runs.
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable

from agentik.models._redact import Redactor, StreamMasker
from agentik.models._sse import SSEDecoder
from agentik.models._wire import ChunkAccumulator

KEY = "sk-PLANTED-7c4e1f0a9b2d8e3f6a5c"


def texts(chars: int, delta: int) -> dict[str, str]:
    plain = ("The quick brown fox jumps over the lazy dog; " * (chars // 40 + 1))[:chars]
    s_ends = ("abc" + "s") * (chars // 4)
    quoting = ((f"key {KEY} " + "x" * 100)[:100] * (chars // 100 + 1))[:chars]
    return {"plain": plain, "s-ends": s_ends[:chars], "quoting": quoting}


def sse_frames(text: str, delta: int) -> list[str]:
    """One SSE frame (one read from the network) per delta."""
    frames: list[str] = []
    for start in range(0, len(text), delta):
        choice = {"index": 0, "delta": {"content": text[start : start + delta]}}
        frames.append(f"data: {json.dumps({'choices': [{**choice, 'finish_reason': None}]})}\n\n")
    return frames


def stream_path(redactor: Redactor, frames: list[str], *, masked: bool) -> Callable[[], object]:
    def run() -> object:
        decoder, accumulator = SSEDecoder(), ChunkAccumulator()
        masker = StreamMasker(redactor)
        shown = 0
        for frame in frames:
            for data in decoder.feed(frame):
                deltas = accumulator.feed(json.loads(redactor.text(data)))
                shown += len(masker.feed(deltas) if masked else deltas)
        answer = accumulator.finish()
        if masked:
            shown += len(masker.flush())
            answer = redactor.response(answer)
        return shown, answer

    return run


def best(run: Callable[[], object], number: int) -> float:
    """Seconds per call, the best of one repeat."""
    return timeit.timeit(run, number=number) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--delta", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    redactor = Redactor.for_credentials(KEY, {"Authorization": f"Bearer {KEY}"}, "http://h/v1")
    print(f"{args.chars}-character answer in {args.delta}-character deltas, µs per answer")
    for name, text in texts(args.chars, args.delta).items():
        frames = sse_frames(text, args.delta)
        deltas = len(frames)
        runs = [stream_path(redactor, frames, masked=masked) for masked in (False, True)]
        times: list[list[float]] = [[], []]
        for _ in range(args.repeat):  # interleaved, so that both see the same machine load
            for run, seen in zip(runs, times, strict=True):
                seen.append(best(run, 10))
        plain, masked = (min(seen) * 1e6 for seen in times)
        extra = masked - plain
        print(
            f"{name:>8}: unmasked {plain:6.0f}  masked {masked:6.0f}  "
            f"(+{extra:.0f} µs, +{extra / plain:.0%}; {extra * 1000 / deltas:.0f} ns a delta)"
        )


if __name__ == "__main__":
    main()
