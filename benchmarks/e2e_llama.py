"""End to end: a transformers Llama model, plain, kernelized with our layers, and with F.rms_norm.

    python benchmarks/e2e_llama.py --rmsnorm REPO --activation REPO --out DIR
                                   [--device cuda|cpu] [--compile] [--smoke]

REPO is a kernel repository as `kernels.LocalLayerRepository` takes it (a folder holding
build/<variant>). The model is `LlamaForCausalLM` built from a config (8 layers, hidden 2048,
intermediate 5632, 16 heads, vocabulary 32000, bfloat16) with random weights: no download. Every
variant is a copy of the same weights:

- plain:             the model as transformers defines it (LlamaRMSNorm in PyTorch ops);
- F.rms_norm:        every LlamaRMSNorm's forward patched to torch.nn.functional.rms_norm;
- kernelized:        `kernels.kernelize(model, mode=Mode.INFERENCE)` with the mapping
                     RMSNorm -> our rmsnorm kernel's `LlamaRMSNorm` layer (transformers
                     declares the layer with `use_kernel_forward_from_hub("RMSNorm")`; where an
                     installed version does not, `replace_kernel_forward_from_hub` does it here);
- gated:             the model with each LlamaMLP replaced by a block of transformers' own
                     Linear layers with gate and up in one matmul, `down(SiluAndMul(gate_up(x)))`,
                     SiluAndMul being a module declared with `use_kernel_forward_from_hub`
                     (LlamaMLP has no activation module that kernelize could map);
- gated-kernelized:  that model kernelized with RMSNorm -> our LlamaRMSNorm and
                     SiluAndMul -> our activation kernel's `SiluAndMul` layer.

Measured per variant, wall clock with the device synchronised (median of several runs):
prefill (one forward of 1 x 512 prompt tokens, logits of the last token only, as generate's
first step) and greedy decode (`model.generate`, 64 new tokens after that prompt, KV cache;
per-token figure = (time for 64 tokens - time for 1 token) / 63), and whether the generated
tokens equal those of the plain model of the same structure. With --compile:
`torch.compile(model, mode="reduce-overhead", fullgraph=True)` (CUDA graphs; fullgraph
falls back to False if transformers breaks the graph, which is recorded) of the plain and the
kernelized model, one forward without KV cache at 1 and at 512 tokens; and, to show why the
layer hands PyTorch ops to the compiler, the kernelized model with the layer forced to call
the opaque op under torch.compile too ("kernelized-opaque").
Writes <out>/e2e_llama.json and <out>/e2e_llama.png and prints the table. --smoke: a tiny
model and few tokens (any device), for tests.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

FULL = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
            num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048)
SMOKE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)


# --- the models -----------------------------------------------------------------------------

def silu_and_mul_module():
    from kernels import use_kernel_forward_from_hub

    @use_kernel_forward_from_hub("SiluAndMul")
    class SiluAndMul(nn.Module):
        """silu(x[..., :d]) * x[..., d:], d = x.shape[-1] // 2 (the unfused PyTorch code)."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            d = x.shape[-1] // 2
            return F.silu(x[..., :d]) * x[..., d:]

    return SiluAndMul


class GatedMLP(nn.Module):
    """LlamaMLP with its gate and up projections in one Linear: down(silu(gate) * up)."""

    def __init__(self, mlp: nn.Module, act_cls: type):
        super().__init__()
        gate, up = mlp.gate_proj, mlp.up_proj
        self.gate_up_proj = nn.Linear(gate.in_features, 2 * gate.out_features, bias=False,
                                      device=gate.weight.device, dtype=gate.weight.dtype)
        with torch.no_grad():
            self.gate_up_proj.weight.copy_(torch.cat([gate.weight, up.weight], 0))
        self.act_fn = act_cls()
        self.down_proj = mlp.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


def build_model(cfg: dict, device: str, dtype: torch.dtype, seed: int = 0) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**cfg, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model = model.to(dtype).eval()
    with torch.no_grad():  # random norm weights too (transformers initialises them to 1)
        gen = torch.Generator(device="cpu").manual_seed(seed + 1)
        for m in model.modules():
            if type(m).__name__ == "LlamaRMSNorm":
                w = 1 + 0.1 * torch.randn(m.weight.shape, generator=gen)
                m.weight.copy_(w.to(m.weight.dtype))
    return model


def llama_rms_norm_class():
    from transformers.models.llama import modeling_llama

    cls = modeling_llama.LlamaRMSNorm
    if not hasattr(cls, "kernel_layer_name"):  # an older transformers: declare it here
        from kernels import replace_kernel_forward_from_hub
        replace_kernel_forward_from_hub(cls, "RMSNorm")
    return cls


def patch_f_rms_norm(model: nn.Module, norm_cls: type) -> int:
    def forward(self, hidden_states):
        return F.rms_norm(hidden_states, (hidden_states.shape[-1],), self.weight,
                          self.variance_epsilon)

    n = 0
    for m in model.modules():
        if isinstance(m, norm_cls):
            m.forward = forward.__get__(m)
            n += 1
    return n


def make_gated(model: nn.Module, act_cls: type) -> nn.Module:
    for layer in model.model.layers:
        layer.mlp = GatedMLP(layer.mlp, act_cls)
    return model


def kernelize_model(model: nn.Module, mapping: dict, device: str) -> nn.Module:
    from kernels import Mode, kernelize, use_kernel_mapping

    with use_kernel_mapping(mapping, inherit_mapping=False):
        return kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device=device)


def count_kernelized(model: nn.Module) -> dict:
    """How many modules run a forward from one of our kernels' layers, per layer name."""
    counts: dict[str, int] = {}
    for m in model.modules():
        fwd = getattr(m.forward, "__func__", m.forward)
        module = getattr(fwd, "__module__", "") or ""
        if module.startswith(("_rmsnorm_", "_activation_")) and module.endswith(".layers"):
            name = fwd.__qualname__.split(".")[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


# --- timing ---------------------------------------------------------------------------------

def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def interleaved(fns: dict, device: str, rounds: int, warmup: int, calls: int = 1) -> dict:
    """Wall-clock ms per call of each fn, the fns timed in turn round after round (so a drift
    of clocks or host state reaches them alike); median and min over the rounds."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync(device)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync(device)
            times[name].append((time.perf_counter() - t0) * 1e3 / calls)
    return {name: {"median_ms": statistics.median(t), "min_ms": min(t), "runs": rounds}
            for name, t in times.items()}


def measure(models: dict, ids, new_tokens: int, device: str, reps: int) -> dict:
    mask = torch.ones_like(ids)

    def generate(model, n):
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                              min_new_tokens=n, do_sample=False, pad_token_id=0)

    out = {}
    with torch.inference_mode():
        prefill = interleaved({n: (lambda m=m: m(input_ids=ids, use_cache=False, logits_to_keep=1))
                               for n, m in models.items()}, device, reps, 2)
        one = interleaved({n: (lambda m=m: generate(m, 1)) for n, m in models.items()},
                          device, reps, 1)
        full = interleaved({n: (lambda m=m: generate(m, new_tokens)) for n, m in models.items()},
                           device, max(3, reps // 2), 1)
        for name, model in models.items():
            per_token = ((full[name]["median_ms"] - one[name]["median_ms"])
                         / max(1, new_tokens - 1))
            out[name] = {
                "prefill_ms": prefill[name]["median_ms"], "prefill_min_ms": prefill[name]["min_ms"],
                "generate_1_ms": one[name]["median_ms"], "generate_ms": full[name]["median_ms"],
                "decode_ms_per_token": per_token,
                "tokens": generate(model, new_tokens)[0, ids.shape[1]:].tolist(),
                "last_logits": model(input_ids=ids, use_cache=False).logits[0, -1].float()}
    return out


def measure_compiled(models: dict, shapes: dict, vocab: int, device: str, reps: int) -> dict:
    """torch.compile of each model (reduce-overhead, fullgraph where it holds, static shapes),
    forward without KV cache; per token count, the compiled models are timed interleaved."""
    torch._dynamo.reset()
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    mode = "reduce-overhead" if device == "cuda" else None
    out: dict[str, dict] = {name: {} for name in models}
    for n in sorted({n for ns in shapes.values() for n in ns}):
        ids = torch.randint(3, vocab, (1, n), device=device,
                            generator=torch.Generator(device=device).manual_seed(7))
        steps = {}
        for name, model in models.items():
            if n not in shapes[name]:
                continue
            entry = {"fullgraph": True, "error": None}
            t0 = time.perf_counter()
            for fullgraph in (True, False):
                compiled = torch.compile(model, mode=mode, fullgraph=fullgraph, dynamic=False)

                def step(compiled=compiled, ids=ids):
                    if device == "cuda":
                        torch.compiler.cudagraph_mark_step_begin()
                    return compiled(input_ids=ids, use_cache=False).logits

                try:
                    with torch.inference_mode():
                        step()
                        sync(device)
                    break
                except Exception as e:  # a graph break under fullgraph=True
                    if not fullgraph:
                        raise
                    entry.update(fullgraph=False, error=f"{type(e).__name__}: {e}"[:300])
            entry["compile_s"] = time.perf_counter() - t0
            steps[name] = step
            out[name][str(n)] = entry
        with torch.inference_mode():
            timing = interleaved(steps, device, reps, 3, calls=10)
            for name, step in steps.items():
                out[name][str(n)].update(timing[name])
                out[name][str(n)]["logits"] = step()[0, -1].float().clone()
    return out


# --- output ---------------------------------------------------------------------------------

def plot(result: dict, out_dir: Path) -> Path | None:
    """PNG: prefill and decode per variant (ratio to plain), and the compiled forwards."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"no plot: matplotlib unavailable ({e})", file=sys.stderr)
        return None
    variants = result["variants"]
    names = list(variants)
    panels = [("prefill_ms", f"prefill 1x{result['prompt_tokens']} (ms)"),
              ("decode_ms_per_token", "greedy decode, per new token (ms)")]
    compiled = result.get("compiled") or {}
    ncols = len(panels) + (1 if compiled else 0)
    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols, 3.8), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        ys = [variants[n][key] for n in names]
        ax.bar(range(len(names)), ys, color=[f"C{i}" for i in range(len(names))])
        base = variants[names[0]][key]
        for i, y in enumerate(ys):
            ax.text(i, y, f"{y:.2f}\n{base / y:.2f}x", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=25, fontsize=7, ha="right")
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, max(ys) * 1.3)
        ax.grid(axis="y", alpha=0.3)
    if compiled:
        ax = axes[0][-1]
        shapes = sorted({s for v in compiled.values() for s in v}, key=int)
        cnames = list(compiled)
        bar = 0.8 / len(cnames)
        for j, name in enumerate(cnames):
            points = [(i + (j - (len(cnames) - 1) / 2) * bar, compiled[name][s]["median_ms"])
                      for i, s in enumerate(shapes) if s in compiled[name]]
            xs, ys = [x for x, _ in points], [y for _, y in points]
            ax.bar(xs, ys, bar, label=name)
            for x, y in zip(xs, ys):
                ax.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=6)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels([f"{s} tokens" for s in shapes], fontsize=8)
        ax.set_title("torch.compile reduce-overhead, forward, no KV cache (ms)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{result['model']} on {result['device_name']} (ratios: plain's time / this)",
                 fontsize=10)
    fig.tight_layout()
    path = out_dir / "e2e_llama.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def print_table(result: dict) -> None:
    v = result["variants"]
    print(f"\n{result['model']} on {result['device_name']}, torch {result['torch']}, "
          f"transformers {result['transformers']}")
    print(f"{'variant':<18} {'prefill ms':>11} {'vs plain':>9} {'decode ms/tok':>14} "
          f"{'vs plain':>9} {'tokens':>24}")
    for name, r in v.items():
        base = v[r["baseline"]]
        same = "identical" if r["tokens_identical"] else f"differ from {r['first_difference']}"
        print(f"{name:<18} {r['prefill_ms']:>11.3f} {base['prefill_ms'] / r['prefill_ms']:>8.2f}x "
              f"{r['decode_ms_per_token']:>14.3f} "
              f"{base['decode_ms_per_token'] / r['decode_ms_per_token']:>8.2f}x "
              f"{same + ' (vs ' + r['baseline'] + ')':>24}")
    for name, shapes in (result.get("compiled") or {}).items():
        for n, e in shapes.items():
            print(f"compiled {name:<18} {n:>4} tokens {e['median_ms']:8.3f} ms "
                  f"(fullgraph={e['fullgraph']}, compile {e['compile_s']:.0f}s"
                  f"{', ' + e['error'] if e['error'] else ''})")


# --- main -----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rmsnorm", type=Path, required=True, help="rmsnorm kernel repository")
    p.add_argument("--activation", type=Path, required=True, help="activation kernel repository")
    p.add_argument("--out", type=Path, default=Path("bench-results"))
    p.add_argument("--device", choices=["cuda", "cpu"], default=None)
    p.add_argument("--compile", action="store_true", help="also the torch.compile comparison")
    p.add_argument("--smoke", action="store_true", help="a tiny model, few tokens")
    p.add_argument("--reps", type=int, default=None)
    args = p.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cfg, prompt, new_tokens = (SMOKE, 16, 8) if args.smoke else (FULL, 512, 64)
    reps = args.reps or (2 if args.smoke else 10)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32

    import transformers
    from kernels import LocalLayerRepository, get_local_kernel

    rms_kernel = get_local_kernel(args.rmsnorm.resolve(), backend=device)
    act_kernel = get_local_kernel(args.activation.resolve(), backend=device)
    norm_cls = llama_rms_norm_class()
    act_cls = silu_and_mul_module()
    rms_repo = {"RMSNorm": {device: LocalLayerRepository(args.rmsnorm.resolve(),
                                                         layer_name="LlamaRMSNorm")}}
    act_repo = {"SiluAndMul": {device: LocalLayerRepository(args.activation.resolve(),
                                                            layer_name="SiluAndMul")}}

    base = build_model(cfg, device, dtype)
    ids = torch.randint(3, cfg["vocab_size"], (1, prompt), device=device,
                        generator=torch.Generator(device=device).manual_seed(5))
    models = {"plain": base}
    models["F.rms_norm"] = copy.deepcopy(base)
    patched = patch_f_rms_norm(models["F.rms_norm"], norm_cls)
    models["kernelized"] = kernelize_model(copy.deepcopy(base), rms_repo, device)
    models["gated"] = make_gated(copy.deepcopy(base), act_cls)
    models["gated-kernelized"] = kernelize_model(make_gated(copy.deepcopy(base), act_cls),
                                                 {**rms_repo, **act_repo}, device)
    baselines = {"plain": "plain", "F.rms_norm": "plain", "kernelized": "plain",
                 "gated": "gated", "gated-kernelized": "gated"}

    print(f"measuring {', '.join(models)} (interleaved) ...", flush=True)
    variants = measure(models, ids, new_tokens, device, reps)
    for name, model in models.items():
        variants[name]["kernelized_layers"] = count_kernelized(model)
    logits = {name: r.pop("last_logits") for name, r in variants.items()}
    for name, r in variants.items():
        ref = variants[baselines[name]]
        r["baseline"] = baselines[name]
        r["tokens_identical"] = r["tokens"] == ref["tokens"]
        r["first_difference"] = next((i for i, (a, b) in enumerate(zip(r["tokens"], ref["tokens"]))
                                      if a != b), None)
        r["prefill_speedup"] = ref["prefill_ms"] / r["prefill_ms"]
        r["decode_speedup"] = ref["decode_ms_per_token"] / r["decode_ms_per_token"]
        r["vs_plain_decode_speedup"] = (variants["plain"]["decode_ms_per_token"]
                                        / r["decode_ms_per_token"])
        r["last_logits_max_abs_diff"] = float((logits[name] - logits[baselines[name]]).abs().max())
    assert patched and variants["kernelized"]["kernelized_layers"].get("LlamaRMSNorm"), \
        "kernelize replaced no RMSNorm"

    compiled = None
    if args.compile:
        opaque = copy.deepcopy(models["kernelized"])
        op = rms_kernel.ops.rms_norm.default

        def opaque_forward(self, hidden_states):
            return op(hidden_states, self.weight, self.variance_epsilon)

        for m in opaque.modules():
            if isinstance(m, norm_cls):
                m.forward = opaque_forward.__get__(m)
        print("compiling and timing plain, kernelized, kernelized-opaque ...", flush=True)
        compiled = measure_compiled(
            {"plain": models["plain"], "kernelized": models["kernelized"], "kernelized-opaque": opaque},
            {"plain": [1, prompt], "kernelized": [1, prompt], "kernelized-opaque": [prompt]},
            cfg["vocab_size"], device, reps)
        for name, shapes_ in compiled.items():
            for n, e in shapes_.items():
                ref = compiled["plain"][n]
                e["vs_plain"] = ref["median_ms"] / e["median_ms"]
                e["logits_max_abs_diff_vs_plain"] = float((e.pop("logits") - ref["logits"]).abs().max()) \
                    if name != "plain" else 0.0
        for e in compiled["plain"].values():
            e.pop("logits", None)

    dev_name = torch.cuda.get_device_name() if device == "cuda" else platform.machine()
    result = {
        "model": (f"LlamaForCausalLM {cfg['num_hidden_layers']} layers, hidden "
                  f"{cfg['hidden_size']}, intermediate {cfg['intermediate_size']}, "
                  f"{cfg['num_attention_heads']} heads, vocab {cfg['vocab_size']}, {str(dtype)[6:]}, "
                  "random weights"),
        "config": cfg, "device": device, "device_name": dev_name, "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "smoke": args.smoke, "prompt_tokens": prompt, "new_tokens": new_tokens, "reps": reps,
        "timer": ("wall clock with the device synchronised, median of runs; decode per token = "
                  f"(generate({new_tokens}) - generate(1)) / {new_tokens - 1}"),
        "command": "python benchmarks/e2e_llama.py --rmsnorm REPO --activation REPO --out OUT"
                   + (f" --device {device}") + (" --compile" if args.compile else "")
                   + (" --smoke" if args.smoke else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rmsnorm_variant": Path(rms_kernel.__file__).parent.name,
        "activation_variant": Path(act_kernel.__file__).parent.name,
        "variants": variants, "compiled": compiled,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "e2e_llama.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    png = plot(result, args.out)
    print_table(result)
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
