"""``python -m bench.engine_link``: llama-server linked to llama-cpp-python's libraries against the static build.

`swm engine build` compiles only the server's own sources and links the llama.cpp libraries pip already compiled
for llama-cpp-python (``--link shared``, the default), or compiles the whole tree into one file (``--link static``).
This builds each in a folder of its own (both from the same sdist, with the cores given), then serves the embedded
SmolLM2-135M with each in turn (``SWM_LLAMA_SERVER``) and, on the same prompts, measures prompt and decode tokens/s
(the server's own timings, best of ``--repeats``) and whether the two draw the same tokens: greedy, and seeded at
temperature 0.7 (``cache_prompt`` off). Build seconds, tokens/s and their ratios are the result.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.engine_context import TEXT, speeds
from bench.engine_speed import complete
from bench.results import results_page
from swm.serving import embedded, engine


def build_both(source: Path | None, jobs: int, root: Path) -> dict[str, dict[str, Any]]:
    """Build llama-server both ways, each into a cache folder of its own; return their build records."""
    records = {}
    for link in ("shared", "static"):
        os.environ["SWM_CACHE_DIR"] = str(root / link)
        records[link] = engine.build(source, jobs=jobs, force=True, link=link,
                                     echo=lambda text: print(text, file=sys.stderr))
    os.environ.pop("SWM_CACHE_DIR")
    return records


def measure(binary: str, lengths: list[int], decode: int, repeats: int, draws: int) -> dict[str, Any]:
    """Serve the embedded model with ``binary``: best prompt and decode tokens/s per length, and the draws."""
    os.environ["SWM_LLAMA_SERVER"] = binary  # a server of another binary is started again
    server = embedded.ensure_server()
    root = server.base_url.removesuffix("/v1")
    measured = speeds(root, lengths, decode, repeats)  # bench.engine_context's prompts and timings
    prompt = TEXT * 20 + "Then"
    texts = [complete(root, {"prompt": prompt, "n_predict": 48, "cache_prompt": False, "temperature": 0.0,
                             "seed": 1})["content"]]
    texts += [complete(root, {"prompt": prompt, "n_predict": 48, "cache_prompt": False, "temperature": 0.7,
                              "seed": seed})["content"] for seed in range(draws)]
    threads = server.command[server.command.index("--threads") + 1]
    embedded.stop_server()
    return {"speeds": measured, "texts": texts, "threads": threads}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_link", description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None, help="llama-cpp-python's sdist [default: pip download]")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--lengths", default="40,800,1900", help="prompt lengths in tokens (about)")
    parser.add_argument("--decode", type=int, default=48, help="tokens decoded after each prompt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--draws", type=int, default=8, help="seeded draws at temperature 0.7 compared")
    parser.add_argument("--no-page", action="store_true")
    args = parser.parse_args(argv)
    with results_page("engine-link", "llama-server linked to llama-cpp-python's libraries, against static",
                      "bench.engine_link", argv, enabled=not args.no_page, markdown=True):
        run(args)


def run(args: argparse.Namespace) -> None:
    os.environ["SWM_EMBEDDED_ENGINE"] = "llama-server"
    load = os.getloadavg()
    lengths = [int(n) for n in args.lengths.split(",") if n]
    with tempfile.TemporaryDirectory(prefix="swm-engine-link-") as tmp:
        records = build_both(args.source, args.jobs, Path(tmp))
        results = {link: measure(str(records[link]["binary"]), lengths, args.decode, args.repeats, args.draws)
                   for link in ("shared", "static")}
    os.environ.pop("SWM_LLAMA_SERVER", None)
    shared, static = results["shared"], results["static"]
    print(f"Load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores); "
          f"llama-cpp-python {engine.version()}, built with {args.jobs} jobs; served with {shared['threads']} "
          f"thread(s), {args.decode} tokens decoded after each prompt, best of {args.repeats}.\n")
    print("| | shared (`--link shared`, the default) | static (`--link static`) | static / shared |")
    print("|---|---|---|---|")
    seconds = (float(records["shared"]["seconds"]), float(records["static"]["seconds"]))
    print(f"| build, s | {seconds[0]:.1f} | {seconds[1]:.1f} | {seconds[1] / seconds[0]:.2f}x |")
    for i in range(len(lengths)):
        (n, ps, ds), (_, pt, dt) = shared["speeds"][i], static["speeds"][i]
        print(f"| prompt tok/s at {n} tokens | {ps:.0f} | {pt:.0f} | {pt / ps:.2f}x |")
        print(f"| decode tok/s after {n} tokens | {ds:.0f} | {dt:.0f} | {dt / ds:.2f}x |")
    same = sum(a == b for a, b in zip(shared["texts"], static["texts"], strict=True))
    print(f"\nThe same text from both: greedy {'yes' if shared['texts'][0] == static['texts'][0] else 'NO'}; "
          f"{same - (shared['texts'][0] == static['texts'][0])} of {args.draws} seeded draws at temperature 0.7.")
    print(f"\nLoad average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}.")


if __name__ == "__main__":
    main()
