"""nvfp4-ab: a real end-to-end A/B of NVFP4 weights against bf16 weights, on the CPU, through the gate.

The story, top to bottom:
1. Data that ships inside a package: scikit-learn's digits (1797 8x8 images, bundled, no download),
   split once by a fixed seed into 797 training and 1000 test images.
2. A small MLP (64-128-128-10, ReLU) trained at run time in fp32, deterministically (fixed seeds,
   deterministic algorithms, one CPU thread, so the same weights on every machine of this build).
3. The test set evaluated twice with bf16 activations and fp32 accumulation, differing only in the
   weights: once the bf16-rounded weights, once the same bf16 weights quantized to NVFP4 through the
   catalog (``op("nvfp4_quantize")``: certified dispatch runs the kernel where the cell is certified
   for this device, the contract's formula otherwise) and dequantized by the reference
   (``references.formats.nvfp4``: per-row 16-element blocks, e4m3 block scales, one fp32 global scale
   per matrix). Quantization is bitwise-specified, so both routes give the same bits.
4. Each evaluation written as lm-evaluation-harness would write a multiple-choice task with
   ``--log_samples`` (``<out>/<model>/samples_digits_<date>.jsonl``: per doc the log-likelihood of
   each of the 10 classes, ``acc``), then ``accuracy-gate BF16 NVFP4`` judges the pair; its report and
   exit code are this tool's.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import pathlib
import sys
import tempfile

from tools import accuracy_gate

# torch, the catalog and the reference are imported by the functions that use them: --help and a bad flag
# need none of them.

PROG = "nvfp4-ab"
TASK = "digits"
SPLIT_SEED = 0
TRAIN_SEED = 1
TRAIN_IMAGES = 797  # the rest, 1000 images, is the test set the gate judges
HIDDEN_WIDTHS = (128, 128)  # every K (64, 128, 128) a multiple of the 16-element NVFP4 block
EPOCHS = 60
BATCH = 32
LEARNING_RATE = 1e-3
CLASSES = 10
# E2M1's largest magnitude (6) times e4m3's (448): the encode scale maps a matrix's amax onto the
# largest representable product, as the contract's global_scale = 448 * 6 / amax(x).
NVFP4_RANGE = 448.0 * 6.0


@contextlib.contextmanager
def deterministic_cpu():
    """One thread and deterministic kernels while inside; the caller's settings restored after."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def load_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, test images, test labels, test image indices); pixels scaled to 0..1."""
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(SPLIT_SEED))
    train, test = order[:TRAIN_IMAGES], order[TRAIN_IMAGES:]
    return images[train], labels[train], images[test], labels[test], test


def train_mlp(images: torch.Tensor, labels: torch.Tensor) -> list[torch.nn.Linear]:
    import torch

    torch.manual_seed(TRAIN_SEED)
    widths = (images.shape[1], *HIDDEN_WIDTHS, CLASSES)
    linears = [torch.nn.Linear(width_in, width_out) for width_in, width_out in zip(widths, widths[1:])]
    model = torch.nn.Sequential(*[module for linear in linears for module in (linear, torch.nn.ReLU())][:-1])
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    shuffles = torch.Generator().manual_seed(TRAIN_SEED)
    for _ in range(EPOCHS):
        for batch in torch.randperm(len(labels), generator=shuffles).split(BATCH):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(images[batch]), labels[batch]).backward()
            optimizer.step()
    return linears


def bf16_weights(linears: list[torch.nn.Linear]) -> list[torch.Tensor]:
    import torch

    return [linear.weight.detach().to(torch.bfloat16).float() for linear in linears]


def nvfp4_weights(linears: list[torch.nn.Linear]) -> list[torch.Tensor]:
    """Each bf16 weight [N, K] quantized to NVFP4 through the catalog and dequantized back to fp32."""
    import torch

    from ops.catalog import op
    from references.formats.nvfp4 import nvfp4_dequantize

    dequantized = []
    for linear in linears:
        weight = linear.weight.detach().to(torch.bfloat16)
        amax = weight.float().abs().max()
        global_scale = torch.tensor([NVFP4_RANGE / amax.item() if amax > 0 else 1.0], dtype=torch.float32)
        packed, block_scales = op("nvfp4_quantize")(weight, global_scale)
        dequantized.append(nvfp4_dequantize(packed, block_scales, global_scale))
    return dequantized


def class_log_likelihoods(images: torch.Tensor, weights: list[torch.Tensor],
                          linears: list[torch.nn.Linear]) -> torch.Tensor:
    """Forward pass with bf16 activations and fp32 accumulation: every layer reads bf16 inputs, sums in
    fp32 against the given fp32 weight values (bf16 biases) and rounds its output to bf16 once."""
    import torch

    activations = images.to(torch.bfloat16)
    for layer, (weight, linear) in enumerate(zip(weights, linears)):
        bias = linear.bias.detach().to(torch.bfloat16).float()
        activations = (activations.float() @ weight.T + bias).to(torch.bfloat16)
        if layer < len(weights) - 1:
            activations = torch.relu(activations)
    return torch.log_softmax(activations.float(), dim=-1)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def lm_eval_sample(doc_id: int, image_index: int, label: int, log_likelihoods: list[float]) -> dict:
    """One line as lm-eval writes a multiple-choice doc: a loglikelihood request per choice (context,
    continuation), resps [[ [ll, is_greedy] ]] per choice, acc = whether the argmax is the gold one."""
    doc = {"image_index": image_index, "label": label}
    context = f"sklearn digits image {image_index}. Digit:"
    predicted = max(range(CLASSES), key=lambda choice: log_likelihoods[choice])
    per_choice = [[log_likelihoods[choice], choice == predicted] for choice in range(CLASSES)]
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": str(label),
        "arguments": {f"gen_args_{choice}": {"arg_0": context, "arg_1": f" {choice}"} for choice in range(CLASSES)},
        "resps": [[response] for response in per_choice],
        "filtered_resps": per_choice,
        "filter": "none",
        "metrics": ["acc"],
        "doc_hash": sha256(json.dumps(doc, indent=2, ensure_ascii=False)),
        "prompt_hash": sha256(context),
        "target_hash": sha256(str(label)),
        "acc": 1.0 if predicted == label else 0.0,
    }


def write_samples(out: pathlib.Path, model_name: str, date_id: str, image_indices: torch.Tensor,
                  labels: torch.Tensor, log_likelihoods: torch.Tensor) -> pathlib.Path:
    folder = out / model_name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"samples_{TASK}_{date_id}.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for doc_id, (image_index, label, row) in enumerate(zip(image_indices.tolist(), labels.tolist(),
                                                               log_likelihoods.tolist())):
            handle.write(json.dumps(lm_eval_sample(doc_id, image_index, label, row), ensure_ascii=False) + "\n")
    return path


def relative_rms(approximation: torch.Tensor, exact: torch.Tensor) -> float:
    return ((approximation - exact).norm() / exact.norm()).item()


def main(argv: list[str] | None = None) -> int:
    parser = accuracy_gate.OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="folder for the two samples files (default: a new temporary folder, kept)")
    parser.add_argument("--json", action="store_true", help="have the gate print JSON instead of its report")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    try:
        out = args.out or pathlib.Path(tempfile.mkdtemp(prefix=f"{PROG}-"))
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(f"{PROG}: error: --out: cannot create {str(args.out)!r}: {error.strerror}", file=sys.stderr)
        return 2

    import torch

    with deterministic_cpu():
        train_images, train_labels, test_images, test_labels, test_indices = load_split()
        linears = train_mlp(train_images, train_labels)
        with torch.no_grad():
            reference, quantized = bf16_weights(linears), nvfp4_weights(linears)
            arms = {"bf16": class_log_likelihoods(test_images, reference, linears),
                    "nvfp4": class_log_likelihoods(test_images, quantized, linears)}

    widths = "-".join(str(width) for width in (test_images.shape[1], *HIDDEN_WIDTHS, CLASSES))
    print(f"{PROG}: scikit-learn digits, {len(train_labels)} training / {len(test_labels)} test images; "
          f"MLP {widths} trained in fp32 on the CPU (torch {torch.__version__}, seeds {SPLIT_SEED}/{TRAIN_SEED})")
    errors = ", ".join(f"{relative_rms(q, r):.3f}" for q, r in zip(quantized, reference))
    print(f"{PROG}: nvfp4 weight error vs bf16, relative RMS per layer: {errors}")
    date_id = datetime.datetime.now().isoformat().replace(":", "-")  # as lm-eval names its files
    paths = {arm: write_samples(out, f"digits-mlp-{arm}", date_id, test_indices, test_labels, log_likelihoods)
             for arm, log_likelihoods in arms.items()}
    gate_argv = [str(paths["bf16"]), str(paths["nvfp4"])] + (["--json"] if args.json else [])
    print(f"{PROG}: $ tools/accuracy-gate {' '.join(gate_argv)}", flush=True)
    return accuracy_gate.main(gate_argv)
