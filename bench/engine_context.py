"""``python -m bench.engine_context``: llama-server's prompt and decode speed against the context, per attention.

A multi-turn seat's append-only chat is long (a Werewolf seat's reaches about 2,000 tokens), so what a token
costs at that context decides an episode's wall time. For each ``--flash-attn`` setting in turn the embedded
SmolLM2-135M is served by llama-server as swm starts it (``SWM_EMBEDDED_FLASH_ATTN``), and a prompt of each
length is evaluated whole (no prompt cache) and then decoded for ``--decode`` tokens (end-of-text ignored),
``--repeats`` times; the table keeps each cell's best tokens/s (the server's own timings) and the decode
speed's ratio to the first setting's.
"""

from __future__ import annotations

import argparse
import os

from bench.engine_speed import complete
from bench.results import results_page
from swm.serving import embedded

TEXT = "The harbour town wakes early. Mara sells fish at the market. Tomas mends the nets. "


def speeds(root: str, lengths: list[int], decode: int, repeats: int) -> list[tuple[int, float, float]]:
    """Return (prompt tokens, best prompt tokens/s, best decode tokens/s) for a prompt of about each length."""
    rows = []
    for length in lengths:
        prompt = TEXT * max(1, length // 21)  # the sentence is 21 of SmolLM2's tokens
        timings = [complete(root, {"prompt": prompt, "n_predict": decode, "ignore_eos": True, "cache_prompt": False,
                                    "temperature": 0.0, "seed": 1})["timings"] for _ in range(repeats)]
        rows.append((int(timings[0]["prompt_n"]), max(t["prompt_per_second"] for t in timings),
                     max(t["predicted_per_second"] for t in timings)))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_context", description=__doc__.splitlines()[0])
    parser.add_argument("--flash-attn", default="off,on", help="llama-server --flash-attn settings, in turn")
    parser.add_argument("--lengths", default="40,800,1900,3800", help="prompt lengths in tokens (about)")
    parser.add_argument("--decode", type=int, default=48, help="tokens decoded after each prompt")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-page", action="store_true")
    args = parser.parse_args(argv)
    with results_page("engine-context", "llama-server's speed against the context, per attention setting",
                      "bench.engine_context", argv, enabled=not args.no_page, markdown=True):
        run(args)


def run(args: argparse.Namespace) -> None:
    os.environ["SWM_EMBEDDED_ENGINE"] = "llama-server"
    load = os.getloadavg()
    lengths = [int(n) for n in args.lengths.split(",") if n]
    results: dict[str, list[tuple[int, float, float]]] = {}
    threads = ""
    for setting in [s for s in args.flash_attn.split(",") if s]:
        os.environ["SWM_EMBEDDED_FLASH_ATTN"] = setting  # a server under other settings is started again
        server = embedded.ensure_server()
        threads = server.command[server.command.index("--threads") + 1]
        results[setting] = speeds(server.base_url.removesuffix("/v1"), lengths, args.decode, args.repeats)
    embedded.stop_server()
    print(f"Load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores); "
          f"llama-server, {threads} thread(s), {args.decode} tokens decoded after each prompt, best of "
          f"{args.repeats}.\n")
    settings = list(results)
    print("| prompt tokens | " + " | ".join(f"prompt tok/s ({s})" for s in settings) + " | "
          + " | ".join(f"decode tok/s ({s})" for s in settings) + " | " +
          " | ".join(f"decode {s} / {settings[0]}" for s in settings[1:]) + " |")
    print("|---|" + "---|" * (3 * len(settings) - 1))
    for i in range(len(lengths)):
        cells = [f"{results[s][i][1]:.0f}" for s in settings] + [f"{results[s][i][2]:.0f}" for s in settings]
        cells += [f"{results[s][i][2] / results[settings[0]][i][2]:.2f}x" for s in settings[1:]]
        print(f"| {results[settings[0]][i][0]} | " + " | ".join(cells) + " |")
    print(f"\nLoad average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}.")


if __name__ == "__main__":
    main()
