"""A transformers Llama-style model of random weights (built from a config: nothing is
downloaded) generating tokens with `model.generate()`, first eagerly, then with the library's
own torch.compile and CUDA graphs (a static cache, `disable_compile=False`): the decode loop
users bring most often, which marks no step — no NVTX range, no `ProfilerStep` (issue 24).
Needs torch and transformers (a version whose generate() takes `disable_compile`, 4.50 or
later).

Phases (each generated token's period from CUDA events, recorded by a logits processor that
generate() calls once a token, in µs):
  eager      --rounds generate() calls of --new-tokens tokens, disable_compile=True
  compiled   the same with the library's compile (mode reduce-overhead: CUDA graph replays),
             after one untimed generate() call that compiles and captures

  python examples/transformers_generate.py
  gapscope record -o traces/tf -- python examples/transformers_generate.py
  gapscope analyze traces/tf

What the analysis shows, verified on one recording (traces/transformers-generate-record-h200.json.gz:
one H200, torch 2.11, transformers 5.17, default `gapscope record`; the figures are in
traces/README.md): one eager loop found from the kernel sequence with a step of one token,
4 × 63 decode steps (the prefills between the calls left over), its period within 5 % of this
program's own eager period in that run; the compiled phase's replays as a graph cell; the two
paired by library kernels (the graph's GEMM, attention and split-K kernels in the eager step's
order, the compiler's triton kernels standing for the rest), said as likely, not certain.
Tokens are not identical: two elementwise kernels come in vectorised or unrolled variants by
alignment, in a pattern of 4 tokens, so about half the steps are counted off the unit.
"""
import argparse

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

from step_periods import add_arguments, print_phases, profiled, write_json


class TokenEvents(LogitsProcessor):
    """Records a CUDA event each time generate() asks for the next token's scores."""

    def __init__(self):
        self.events = []

    def __call__(self, input_ids, scores):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)
        return scores

    def periods_us(self):
        torch.cuda.synchronize()
        return [a.elapsed_time(b) * 1e3 for a, b in zip(self.events, self.events[1:])]


def generate(model, input_ids, args, compiled):
    """One generate() call of exactly --new-tokens tokens; returns each token's period, µs."""
    timer = TokenEvents()
    model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        do_sample=False,
        cache_implementation="static",
        disable_compile=not compiled,
        logits_processor=LogitsProcessorList([timer]),
        pad_token_id=0,
    )
    return timer.periods_us()


def main():
    summary, _, details = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(description=summary, epilog=details,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new-tokens", type=int, default=64, help="tokens per generate() (default %(default)s)")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="timed generate() calls per phase (default %(default)s)")
    p.add_argument("--layers", type=int, default=8, help="decoder layers (default %(default)s)")
    p.add_argument("--hidden", type=int, default=1024, help="hidden size (default %(default)s)")
    add_arguments(p)
    args = p.parse_args()

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=args.prompt + args.new_tokens + 16,
    )
    model = LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    input_ids = torch.randint(1, config.vocab_size, (1, args.prompt), device="cuda")

    periods = {}
    with torch.inference_mode():
        generate(model, input_ids, args, compiled=False)  # warm-up: cuBLAS, allocator
        with profiled(args.profile):
            periods["eager"] = sum((generate(model, input_ids, args, compiled=False)
                                    for _ in range(args.rounds)), [])
        generate(model, input_ids, args, compiled=True)  # compiles and captures the graphs
        with profiled(args.profile):
            periods["compiled"] = sum((generate(model, input_ids, args, compiled=True)
                                       for _ in range(args.rounds)), [])

    print(f"torch={torch.__version__} transformers={transformers.__version__} "
          f"device={torch.cuda.get_device_name()!r} layers={args.layers} hidden={args.hidden}")
    print_phases(periods)
    if args.json:
        write_json(args.json, periods, args.profile, transformers=transformers.__version__)


if __name__ == "__main__":
    main()
