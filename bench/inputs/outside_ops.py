"""Operators of networks outside the benchmark suite (resnet50, mobilenet_v2, bert_layer,
gpt2_block), as a user hands them to `simoe-agent tune --model FILE.py:FUNCTION`: each
factory returns one layer of a public architecture and example inputs (static shapes).

- llama_q_proj: LLaMA-7B's attention query projection (hidden 4096 -> 4096, no bias), a
  128-token prompt (Touvron et al., 2023, "LLaMA", Table 2: dimension 4096).
- llama_mlp_up: LLaMA-7B's MLP up-projection (4096 -> 11008, no bias; the released 7B
  config's intermediate_size), the same 128 tokens.
- vit_patch_embed: ViT-B/16's patch embedding (3 -> 768 channels, 16x16 kernel, stride 16,
  one 224x224 image; Dosovitskiy et al., 2021, Table 1).

A second, fresh set, written after the starter model's fix (feature clamp and coverage,
commits 04163b7 and de0af06) and before any run of it, so the fix is checked on operators
nobody diagnosed or tuned on (the three above were the diagnosis's):

- llama13b_mlp_down: LLaMA-13B's MLP down-projection (13824 -> 5120, no bias; the released
  13B config's intermediate_size and hidden size), 128 tokens.
- mistral_k_proj: Mistral-7B's key projection under grouped-query attention (4096 -> 1024:
  8 KV heads of 128; Jiang et al., 2023, "Mistral 7B", Table 1), 128 tokens.
- convnext_pwconv: ConvNeXt-T's first-stage inverted-bottleneck expansion, a pointwise
  Linear 96 -> 384 over the 56x56 positions of one 224x224 image (Liu et al., 2022, "A
  ConvNet for the 2020s": stage 1, C = 96, expansion 4).

A third set, written (2026-12-02 08:30 UTC) after the second set's miss (SiMoE fast beat the
default on 2 of 6 runs there) and before any change it checks and any run of it. From now on
the first two sets are DEVELOPMENT sets: a change to fast mode or to the starter model is
chosen on them only. This set is scored ONCE, on a GPU of an architecture no earlier check
used (bench/inputs/user_gpus/rtx2060.json, Turing), with `python -m bench.compile.user_spec_tune
--gpus bench/inputs/user_gpus/rtx2060.json --ops qwen2_mlp_gate,whisper_fc1,phi2_q_proj,
convnext_dwconv --trials 32 --seed S --label holdout3` for seeds 0 and 1, methods simoe-fast of
the product with the change, simoe-fast of the product before it (main at the commit that adds
this text) and ms-xgb; every row is reported, whatever it shows. Goal (issue 23): SiMoE fast
beats DLight's default (the never-worse rule keeps the tuned schedule) on most of the 8 runs,
where MetaSchedule at 32 trials does not.

- qwen2_mlp_gate: Qwen2-7B's MLP gate projection (3584 -> 18944, no bias; the released
  config's hidden_size and intermediate_size), 128 tokens.
- whisper_fc1: Whisper-base's encoder feed-forward (512 -> 2048, with bias) over the 1500
  frames of a 30 s clip (Radford et al., 2022, "Robust Speech Recognition via Large-Scale
  Weak Supervision", Table 1: base, width 512; MLP 4x).
- phi2_q_proj: Phi-2's attention query projection (2560 -> 2560, with bias; the released
  config's hidden_size), 128 tokens.
- convnext_dwconv: ConvNeXt-T's first-stage depthwise convolution (7x7, 96 channels, padding
  3, 56x56; Liu et al., 2022, stage 1).
"""

from __future__ import annotations

import torch
from torch import nn

TOKENS = 128


def llama_q_proj() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Linear(4096, 4096, bias=False).eval(), (torch.randn(1, TOKENS, 4096),)


def llama_mlp_up() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Linear(4096, 11008, bias=False).eval(), (torch.randn(1, TOKENS, 4096),)


def vit_patch_embed() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 768, kernel_size=16, stride=16).eval()
    return conv, (torch.randn(1, 3, 224, 224),)


def llama13b_mlp_down() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Linear(13824, 5120, bias=False).eval(), (torch.randn(1, TOKENS, 13824),)


def mistral_k_proj() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Linear(4096, 1024, bias=False).eval(), (torch.randn(1, TOKENS, 4096),)


def convnext_pwconv() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Linear(96, 384).eval(), (torch.randn(1, 56, 56, 96),)


def qwen2_mlp_gate() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Linear(3584, 18944, bias=False).eval(), (torch.randn(1, TOKENS, 3584),)


def whisper_fc1() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Linear(512, 2048).eval(), (torch.randn(1, 1500, 512),)


def phi2_q_proj() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Linear(2560, 2560).eval(), (torch.randn(1, TOKENS, 2560),)


def convnext_dwconv() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    conv = nn.Conv2d(96, 96, kernel_size=7, padding=3, groups=96).eval()
    return conv, (torch.randn(1, 96, 56, 56),)
