"""A plain PyTorch decode loop with no NVTX ranges and no profiler annotations: a small
transformer of random weights generates tokens one at a time, eagerly, then as a captured CUDA
graph replayed once per token (needs only torch). Nothing in the program marks a step, so a
profiler sees only the kernel stream: the case gapscope finds the steps in (issue 24).

Phases (each token's period measured with CUDA events, in µs):
  eager    --tokens tokens, the step run eagerly
  graphed  --tokens tokens, the same step captured once in a torch.cuda.CUDAGraph and replayed
Every --check-every tokens the loop checks for a stop token (a kernel and a host sync), as
decode loops do: that step holds ops the others do not.

  python examples/decode_loop.py
  gapscope record -o traces/decode -- python examples/decode_loop.py
  gapscope analyze traces/decode

What the analysis should show (issue 24 acceptance; NOT run yet: written without a GPU): an
eager loop found from the kernel sequence with --tokens steps (the stop checks counted off the
unit), its period within 5 % of this program's eager period (or the tracer's share stated),
the graph replays' cell, and the two paired by kernel sequence, the basis on screen.
"""
import argparse
import json

import torch

from step_periods import print_phases


class TinyDecoder:
    """Embedding, `layers` pre-norm blocks (attention over a static KV cache, an MLP) and a
    tied LM head; every tensor is allocated here, so a step is capturable."""

    def __init__(self, vocab, hidden, layers, max_len, batch):
        opts = dict(device="cuda", dtype=torch.bfloat16)
        scale = hidden ** -0.5
        self.embed = torch.randn(vocab, hidden, **opts) * scale
        self.layers = [
            dict(
                wqkv=torch.randn(hidden, 3 * hidden, **opts) * scale,
                wo=torch.randn(hidden, hidden, **opts) * scale,
                w1=torch.randn(hidden, 4 * hidden, **opts) * scale,
                w2=torch.randn(4 * hidden, hidden, **opts) * (4 * hidden) ** -0.5,
                k=torch.zeros(batch, max_len, hidden, **opts),
                v=torch.zeros(batch, max_len, hidden, **opts),
            )
            for _ in range(layers)
        ]
        self.hidden = hidden
        self.positions = torch.arange(max_len, device="cuda")
        self.token = torch.zeros(batch, dtype=torch.long, device="cuda")
        self.pos = torch.zeros((), dtype=torch.long, device="cuda")

    @staticmethod
    def norm(x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def step(self):
        """One token: reads self.token and self.pos on the device, writes the next token."""
        x = self.embed[self.token]  # [B, H]
        visible = (self.positions <= self.pos).view(1, 1, -1)
        for layer in self.layers:
            q, k, v = (self.norm(x) @ layer["wqkv"]).split(self.hidden, dim=-1)
            layer["k"].index_copy_(1, self.pos.view(1), k.unsqueeze(1))
            layer["v"].index_copy_(1, self.pos.view(1), v.unsqueeze(1))
            scores = (q.unsqueeze(1) @ layer["k"].transpose(1, 2)) * self.hidden ** -0.5
            scores = scores.masked_fill(~visible, float("-inf")).softmax(-1)
            x = x + (scores @ layer["v"]).squeeze(1) @ layer["wo"]
            x = x + torch.relu(self.norm(x) @ layer["w1"]) @ layer["w2"]
        logits = self.norm(x) @ self.embed.T
        self.token.copy_(logits.argmax(-1))
        self.pos.add_(1)


def timed(launch, tokens, decoder, check_every):
    """Runs `tokens` steps with a CUDA event after each; returns the periods in µs."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(tokens + 1)]
    decoder.pos.zero_()
    events[0].record()
    for i in range(tokens):
        launch()
        if check_every and i % check_every == check_every - 1:
            # A stop check, as generate loops do every few tokens: a kernel and a host sync.
            if bool((decoder.token == 0).all()):
                pass
        events[i + 1].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])]


def main():
    summary, _, details = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(description=summary, epilog=details,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=200, help="tokens per phase (default %(default)s)")
    p.add_argument("--layers", type=int, default=4, help="blocks (default %(default)s)")
    p.add_argument("--hidden", type=int, default=1024, help="hidden size (default %(default)s)")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary (default %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="sequences decoded at once (default %(default)s)")
    p.add_argument("--check-every", type=int, default=8,
                   help="tokens between stop checks, 0 for none (default %(default)s)")
    p.add_argument("--json", metavar="PATH", help="write the periods as JSON there")
    args = p.parse_args()
    torch.manual_seed(0)
    max_len = args.tokens + 8
    decoder = TinyDecoder(args.vocab, args.hidden, args.layers, max_len, args.batch)

    # Warm-up on a side stream (cuBLAS handles, allocator), as graph capture requires.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            decoder.step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    periods = {"eager": timed(decoder.step, args.tokens, decoder, args.check_every)}
    graph = torch.cuda.CUDAGraph()
    decoder.pos.zero_()
    with torch.cuda.graph(graph):
        decoder.step()
    periods["graphed"] = timed(graph.replay, args.tokens, decoder, args.check_every)

    print(f"torch={torch.__version__} device={torch.cuda.get_device_name()!r} "
          f"layers={args.layers} hidden={args.hidden} batch={args.batch}")
    print_phases(periods)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "phases": periods}, f)


if __name__ == "__main__":
    main()
