"""The model table of ``compare --models`` (issue 24): tiny models built in code, no download.

Each entry is one line of ``SUITE``: a Hugging Face architecture (``ModelCase``: config and model class names in
the transformers namespace, a tiny config, how it is called) or a plain-PyTorch workload written here
(``PlainCase``). Every entry answers ``build()`` (seeded weights and a first batch) and ``inputs(batch, length)``
(the same batch on every call), so models.py runs them all the same way. Dropout, layer drop and drop path are
zeroed in every config (``_no_randomness``): a training step must be deterministic to be compared with eager's.

Families: decoder (with and without cache, sliding window), decoder-moe, encoder, encoder-decoder, vision, audio,
plain (the workloads of ``PLAIN``: a KeyedJaggedTensor-style embedding split, a ViT block whose qkv is unbound, an
LSTM that unbinds time steps, a DDP-wrapped model in a one-process gloo group); ``gc`` entries train with
activation checkpointing on.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

FIRST_SHAPE = (2, 8)  # (batch, length) of build()'s batch: the first-shape probes and timing


def _generator(batch: int, length: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 * batch + length)


# --- Hugging Face architectures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCase:
    """A transformers architecture from a tiny config. ``call``: how its inputs are made (tokens: ``input_ids``;
    seq2seq: and ``decoder_input_ids``; pixels: ``pixel_values``; waveform: ``input_values``; mel: Whisper's
    ``input_features`` and ``decoder_input_ids``). ``use_cache``: passed where not None. ``checkpointing``:
    ``gradient_checkpointing_enable(kwargs)`` after the build (None: off)."""

    name: str
    config_class: str  # names in the transformers namespace
    model_class: str
    config: dict[str, Any]
    family: str = "decoder"
    call: str = "tokens"
    use_cache: bool | None = None
    checkpointing: dict[str, Any] | None = None

    def available(self) -> bool:
        try:
            import transformers
        except ImportError:
            return False
        return hasattr(transformers, self.config_class) and hasattr(transformers, self.model_class)

    def build(self) -> tuple[nn.Module, dict[str, Any]]:
        import transformers

        torch.manual_seed(0)
        config = getattr(transformers, self.config_class)(**self.config)
        _no_randomness(config)
        model = getattr(transformers, self.model_class)(config)
        if self.checkpointing is not None:  # {}: transformers' default kwargs (use_reentrant=False)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=self.checkpointing or None)
        return model, self.inputs(*FIRST_SHAPE)

    def inputs(self, batch: int, length: int) -> dict[str, Any]:
        """A batch of ``batch`` examples of ``length`` tokens (or frames), the same on every call."""
        generator = _generator(batch, length)
        vocab = self.config.get("vocab_size", 128)
        ids = torch.randint(3, vocab, (batch, length), generator=generator)  # 0-2: pad, bos, eos
        inputs: dict[str, Any]
        if self.call == "pixels":
            size, channels = self.config["image_size"], self.config.get("num_channels", 3)
            inputs = {"pixel_values": torch.randn(batch, channels, size, size, generator=generator)}
        elif self.call == "waveform":
            inputs = {"input_values": torch.randn(batch, 20 * length, generator=generator)}
        elif self.call == "mel":
            frames = 2 * self.config["max_source_positions"]
            features = torch.randn(batch, self.config["num_mel_bins"], frames, generator=generator)
            inputs = {"input_features": features, "decoder_input_ids": ids}
        elif self.call == "seq2seq":
            inputs = {"input_ids": ids, "decoder_input_ids": ids.flip(1)}
        else:
            inputs = {"input_ids": ids}
        if self.use_cache is not None:
            inputs["use_cache"] = self.use_cache
        return inputs


def _no_randomness(config: Any) -> None:
    """Zero every dropout, layer drop and drop path probability of a config (nested configs included)."""
    for key, value in list(vars(config).items()):
        if isinstance(value, float) and "drop" in key and "ratio" not in key:
            setattr(config, key, 0.0)
        elif hasattr(value, "to_dict") and value is not config:
            _no_randomness(value)


_DECODER = {
    "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip
_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
_ENCODER = {
    "vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
    "intermediate_size": 64, "max_position_embeddings": 64, "pad_token_id": 0,
}  # fmt: skip
_BART = {
    "vocab_size": 128, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1,
}  # fmt: skip
_VIT = {
    "image_size": 32, "patch_size": 8, "num_channels": 3, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 64,
}  # fmt: skip

CASES: tuple[ModelCase, ...] = (
    # decoders: with the cache (the default call), without, sliding window, fused projections split into views
    ModelCase("gpt2", "GPT2Config", "GPT2LMHeadModel", {
        "vocab_size": 128, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2, "bos_token_id": 1,
        "eos_token_id": 2}, use_cache=True),
    ModelCase("llama", "LlamaConfig", "LlamaForCausalLM", _DECODER, use_cache=True),
    ModelCase("llama_nocache", "LlamaConfig", "LlamaForCausalLM", _DECODER, use_cache=False),
    ModelCase("qwen2", "Qwen2Config", "Qwen2ForCausalLM", _DECODER, use_cache=True),
    ModelCase("qwen3", "Qwen3Config", "Qwen3ForCausalLM", {**_DECODER, "head_dim": 8}, use_cache=True),
    ModelCase("mistral_sliding", "MistralConfig", "MistralForCausalLM", {**_DECODER, "sliding_window": 4},
              use_cache=True),
    ModelCase("starcoder2_sliding", "Starcoder2Config", "Starcoder2ForCausalLM", {**_DECODER, "sliding_window": 4},
              use_cache=True),
    ModelCase("gemma2", "Gemma2Config", "Gemma2ForCausalLM", {**_DECODER, "head_dim": 8, "sliding_window": 4,
              "query_pre_attn_scalar": 8}, use_cache=True),
    ModelCase("phi3", "Phi3Config", "Phi3ForCausalLM", {**_DECODER, "sliding_window": None}, use_cache=True),
    ModelCase("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM", {**_DECODER, "num_attention_heads": 4},
              use_cache=True),
    ModelCase("gpt_bigcode_mqa", "GPTBigCodeConfig", "GPTBigCodeForCausalLM", {
        "vocab_size": 128, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "multi_query": True,
        "bos_token_id": 1, "eos_token_id": 2}, use_cache=True),
    ModelCase("bloom", "BloomConfig", "BloomForCausalLM", {
        "vocab_size": 128, "hidden_size": 32, "n_layer": 2, "n_head": 4, "bos_token_id": 1, "eos_token_id": 2},
        use_cache=True),
    ModelCase("falcon", "FalconConfig", "FalconForCausalLM", {
        "vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "bos_token_id": 1, "eos_token_id": 2}, use_cache=True),
    ModelCase("opt", "OPTConfig", "OPTForCausalLM", {
        "vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "ffn_dim": 64, "num_attention_heads": 2,
        "max_position_embeddings": 64, "word_embed_proj_dim": 32, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2}, use_cache=True),
    ModelCase("gptj", "GPTJConfig", "GPTJForCausalLM", {
        "vocab_size": 128, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4,
        "bos_token_id": 1, "eos_token_id": 2}, use_cache=True),
    ModelCase("codegen", "CodeGenConfig", "CodeGenForCausalLM", {
        "vocab_size": 128, "n_positions": 64, "n_ctx": 64, "n_embd": 32, "n_layer": 2, "n_head": 4,
        "rotary_dim": 4, "bos_token_id": 1, "eos_token_id": 2}, use_cache=True),
    ModelCase("olmo2", "Olmo2Config", "Olmo2ForCausalLM", _DECODER, use_cache=True),
    ModelCase("stablelm", "StableLmConfig", "StableLmForCausalLM", _DECODER, use_cache=True),
    # mixture of experts
    ModelCase("mixtral", "MixtralConfig", "MixtralForCausalLM",
              {**_DECODER, "num_local_experts": 4, "num_experts_per_tok": 2}, family="decoder-moe", use_cache=True),
    ModelCase("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
              {**_DECODER, **_MOE, "shared_expert_intermediate_size": 32}, family="decoder-moe", use_cache=True),
    ModelCase("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", {**_DECODER, **_MOE, "head_dim": 8},
              family="decoder-moe", use_cache=True),
    ModelCase("granitemoe", "GraniteMoeConfig", "GraniteMoeForCausalLM",
              {**_DECODER, "num_local_experts": 4, "num_experts_per_tok": 2}, family="decoder-moe", use_cache=True),
    ModelCase("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM", {
        **_DECODER, "num_key_value_heads": 4, "moe_intermediate_size": 32, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1,
        "topk_group": 1, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 4, "qk_nope_head_dim": 4,
        "v_head_dim": 8}, family="decoder-moe", use_cache=True),
    # activation checkpointing on (transformers' default: non-reentrant; one reentrant)
    ModelCase("llama_gc", "LlamaConfig", "LlamaForCausalLM", _DECODER, use_cache=False, checkpointing={}),
    ModelCase("gpt2_gc_reentrant", "GPT2Config", "GPT2LMHeadModel", {
        "vocab_size": 128, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2, "bos_token_id": 1,
        "eos_token_id": 2}, use_cache=False, checkpointing={"use_reentrant": True}),
    ModelCase("bert_gc", "BertConfig", "BertModel", _ENCODER, family="encoder", checkpointing={}),
    # encoders
    ModelCase("bert", "BertConfig", "BertModel", _ENCODER, family="encoder"),
    ModelCase("roberta", "RobertaConfig", "RobertaForMaskedLM", {**_ENCODER, "max_position_embeddings": 80},
              family="encoder"),
    ModelCase("distilbert", "DistilBertConfig", "DistilBertForMaskedLM", {
        "vocab_size": 128, "dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64,
        "max_position_embeddings": 64, "pad_token_id": 0}, family="encoder"),
    ModelCase("albert", "AlbertConfig", "AlbertForMaskedLM", {**_ENCODER, "embedding_size": 16},
              family="encoder"),
    ModelCase("electra", "ElectraConfig", "ElectraForPreTraining", {**_ENCODER, "embedding_size": 16},
              family="encoder"),
    ModelCase("deberta", "DebertaConfig", "DebertaForMaskedLM", {**_ENCODER, "relative_attention": True,
              "max_relative_positions": 16, "pos_att_type": ["c2p", "p2c"]}, family="encoder"),
    ModelCase("deberta_v2", "DebertaV2Config", "DebertaV2ForMaskedLM", {**_ENCODER, "relative_attention": True,
              "position_buckets": 8, "pos_att_type": ["c2p", "p2c"]}, family="encoder"),
    ModelCase("mpnet", "MPNetConfig", "MPNetForMaskedLM", {**_ENCODER, "max_position_embeddings": 80},
              family="encoder"),
    # encoder-decoders
    ModelCase("t5", "T5Config", "T5ForConditionalGeneration", {
        "vocab_size": 128, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 2,
        "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}, family="encoder-decoder",
        call="seq2seq", use_cache=True),
    ModelCase("bart", "BartConfig", "BartForConditionalGeneration", _BART, family="encoder-decoder",
              call="seq2seq", use_cache=True),
    ModelCase("marian", "MarianConfig", "MarianMTModel", _BART, family="encoder-decoder", call="seq2seq",
              use_cache=True),
    ModelCase("pegasus", "PegasusConfig", "PegasusForConditionalGeneration", _BART, family="encoder-decoder",
              call="seq2seq", use_cache=True),
    # vision (batch sizes change between steps; the image size is the config's)
    ModelCase("vit", "ViTConfig", "ViTForImageClassification", _VIT, family="vision", call="pixels"),
    ModelCase("deit", "DeiTConfig", "DeiTForImageClassification", _VIT, family="vision", call="pixels"),
    ModelCase("dinov2", "Dinov2Config", "Dinov2Model", _VIT, family="vision", call="pixels"),
    ModelCase("swin", "SwinConfig", "SwinForImageClassification", {
        "image_size": 32, "patch_size": 4, "num_channels": 3, "embed_dim": 16, "depths": [1, 1],
        "num_heads": [2, 2], "window_size": 4}, family="vision", call="pixels"),
    ModelCase("convnext", "ConvNextConfig", "ConvNextForImageClassification", {
        "image_size": 32, "num_channels": 3, "hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2},
        family="vision", call="pixels"),
    ModelCase("resnet", "ResNetConfig", "ResNetForImageClassification", {
        "image_size": 32, "num_channels": 3, "embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1],
        "layer_type": "basic"}, family="vision", call="pixels"),
    # audio (waveform length or decoder length changes between steps)
    ModelCase("wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model", {
        "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "conv_dim": [16, 16], "conv_stride": [5, 2], "conv_kernel": [10, 3], "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 2, "mask_time_prob": 0.0, "apply_spec_augment": False},
        family="audio", call="waveform"),
    ModelCase("whisper", "WhisperConfig", "WhisperForConditionalGeneration", {
        "vocab_size": 128, "num_mel_bins": 8, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
        "max_source_positions": 16, "max_target_positions": 32, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2, "decoder_start_token_id": 1}, family="audio", call="mel", use_cache=True),
)  # fmt: skip


# --- plain PyTorch workloads -----------------------------------------------------------------------------


class JaggedEmbeddingSplit(nn.Module):
    """A KeyedJaggedTensor's ``values`` embedded and weighted, then split by each key's length into per-key
    views that the graph returns (torchrec's ``KeyedJaggedTensor.split``): the workload the unsafe fix of
    pytorch #111411 was made for. ``length_per_key`` is a list of ints, as KJT caches it."""

    def __init__(self, keys: int = 4, vocab: int = 128, dim: int = 16) -> None:
        super().__init__()
        self.keys = keys
        self.embedding = nn.Embedding(vocab, dim)
        self.scale = nn.Linear(dim, dim)

    def forward(
        self, values: torch.Tensor, weights: torch.Tensor, length_per_key: list[int]
    ) -> tuple[torch.Tensor, ...]:
        embedded = self.scale(self.embedding(values)) * weights.unsqueeze(-1)
        per_key = embedded.split(length_per_key, dim=0)
        pooled = torch.stack([t.sum(0) for t in per_key])
        return (pooled, *per_key)


def _jagged_inputs(batch: int, length: int, generator: torch.Generator) -> dict[str, Any]:
    length_per_key = [batch * (length - k) for k in range(4)]
    total = sum(length_per_key)
    return {
        "values": torch.randint(0, 128, (total,), generator=generator),
        "weights": torch.rand(total, generator=generator),
        "length_per_key": length_per_key,
    }


class ViTBlockUnbind(nn.Module):
    """Patch embedding, two timm-style ViT blocks (``qkv.reshape(...).permute(2, 0, 3, 1, 4).unbind(0)``), a
    head; returns the logits and the last block's k and v (as a feature extractor that keeps them)."""

    def __init__(self, dim: int = 32, heads: int = 4, patch: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.heads = heads
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(dim),
                    "qkv": nn.Linear(dim, 3 * dim),
                    "proj": nn.Linear(dim, dim),
                    "norm2": nn.LayerNorm(dim),
                    "fc1": nn.Linear(dim, 2 * dim),
                    "fc2": nn.Linear(2 * dim, dim),
                }
            )
            for _ in range(2)
        )
        self.head = nn.Linear(dim, classes)

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.patch(pixel_values).flatten(2).transpose(1, 2)
        batch, tokens, dim = x.shape
        k = v = x
        for block in self.blocks:
            qkv = block["qkv"](block["norm1"](x)).reshape(batch, tokens, 3, self.heads, dim // self.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            attn = (q @ k.transpose(-2, -1) * (dim // self.heads) ** -0.5).softmax(-1)
            x = x + block["proj"]((attn @ v).transpose(1, 2).reshape(batch, tokens, dim))
            x = x + block["fc2"](F.gelu(block["fc1"](block["norm2"](x))))
        return self.head(x.mean(1)), k, v


def _pixel_inputs(batch: int, length: int, generator: torch.Generator) -> dict[str, Any]:
    return {"pixel_values": torch.randn(batch, 3, 16, 16, generator=generator)}


class LSTMUnbind(nn.Module):
    """An LSTM cell stepped over ``embedded.unbind(1)`` (the time steps), an ``nn.LSTM`` over the stacked states,
    and per-step outputs returned as ``unbind(1)`` of its output (a sequence tagger's per-token tensors)."""

    def __init__(self, vocab: int = 128, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.cell = nn.LSTMCell(dim, dim)
        self.lstm = nn.LSTM(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.embed(input_ids)
        h = c = x.new_zeros(x.shape[0], x.shape[2])
        states = []
        for x_t in x.unbind(1):
            h, c = self.cell(x_t, (h, c))
            states.append(h)
        sequence, _ = self.lstm(torch.stack(states, 1))
        return (self.head(sequence), *sequence.unbind(1))


def _token_inputs(batch: int, length: int, generator: torch.Generator) -> dict[str, Any]:
    return {"input_ids": torch.randint(0, 128, (batch, length), generator=generator)}


class SplitMLP(nn.Module):
    """The model tests/dist_worker.py trains under DDP: outputs are a chunk, a split of a chunk, and an unbind."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.hidden = nn.Linear(width, width)
        self.narrow = nn.Linear(width, 12)
        self.out = nn.Linear(12, 12)

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        h = torch.tanh(self.narrow(torch.relu(self.hidden(torch.relu(self.inp(x))))))
        p, q = self.out(h).chunk(2, dim=-1)
        return p, q.split([2, 4], dim=-1), h.unbind(0)


def ensure_process_group() -> None:
    """A one-process gloo group (rank 0 of 1), kept for the rest of the process, as DDP needs one."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    store = os.path.join(tempfile.mkdtemp(prefix="pv_gloo_"), "store")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)


def _ddp_model() -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    ensure_process_group()
    return DistributedDataParallel(SplitMLP())


def _mlp_inputs(batch: int, length: int, generator: torch.Generator) -> dict[str, Any]:
    return {"x": torch.randn(batch, length, 8, generator=generator)}


def _distributed_available() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


@dataclass(frozen=True)
class PlainCase:
    """A plain-PyTorch workload: ``make`` builds the module (after ``torch.manual_seed(0)``), ``make_inputs``
    a batch from (batch, length, generator)."""

    name: str
    make: Callable[[], nn.Module]
    make_inputs: Callable[[int, int, torch.Generator], dict[str, Any]]
    family: str = "plain"
    needs: Callable[[], bool] = field(default=lambda: True)

    def available(self) -> bool:
        return self.needs()

    def build(self) -> tuple[nn.Module, dict[str, Any]]:
        torch.manual_seed(0)
        return self.make(), self.inputs(*FIRST_SHAPE)

    def inputs(self, batch: int, length: int) -> dict[str, Any]:
        return self.make_inputs(batch, length, _generator(batch, length))


PLAIN: tuple[PlainCase, ...] = (
    PlainCase("kjt_embedding_split", JaggedEmbeddingSplit, _jagged_inputs),
    PlainCase("vit_block_unbind", ViTBlockUnbind, _pixel_inputs),
    PlainCase("lstm_unbind", LSTMUnbind, _token_inputs),
    PlainCase("ddp_split_mlp", _ddp_model, _mlp_inputs, needs=_distributed_available),
)

SUITE: tuple[ModelCase | PlainCase, ...] = (*CASES, *PLAIN)


def suite_cases(names: str | None = None) -> list[ModelCase | PlainCase]:
    """The entries the install can build; ``names``: only those (comma separated, exact names), in that order."""
    entries = {c.name: c for c in SUITE if c.available()}
    if not names:
        return list(entries.values())
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    return [entries[n] for n in dict.fromkeys(wanted) if n in entries]


def unknown_names(names: str) -> list[str]:
    known = {c.name for c in SUITE}
    return [n.strip() for n in names.split(",") if n.strip() and n.strip() not in known]


def step_shapes(steps: int) -> list[tuple[int, int]]:
    """(batch, length) of each training step: batch sizes and lengths change between steps, with a loader's
    smaller last batches (1 x 7) among them."""
    cycle = [(2, 16), (3, 11), (1, 7), (2, 9), (3, 14), (2, 16), (1, 12), (3, 11), (2, 13), (2, 16)]
    return [cycle[i % len(cycle)] for i in range(steps)]
