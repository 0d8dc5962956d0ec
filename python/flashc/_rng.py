"""Dropout's (seed, offset), drawn from PyTorch's generator of the tensors'
device, so torch.manual_seed makes runs repeatable and successive calls
draw different masks. The pair travels as `rng_state`, an int64 tensor of
shape (2,) on the tensors' device (as in flash_attn), which the backward
replays."""
import torch

_U64 = (1 << 64) - 1
# Offsets are reserved in steps of 4 on CUDA generators (Philox draws four
# words per counter; PyTorch requires offsets to be multiples of 4).
_CUDA_OFFSET_STEP = 4


def _to_int64(x):
    x &= _U64
    return x - (1 << 64) if x >= (1 << 63) else x


def draw(device):
    """(seed, offset, rng_state) for one dropout call on `device`."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        generator = torch.cuda.default_generators[index]
        # Reserve an offset range, as PyTorch's own CUDA kernels do: no
        # device work and no synchronisation.
        seed = generator.initial_seed()
        offset = generator.get_offset()
        generator.set_offset(offset + _CUDA_OFFSET_STEP)
    else:
        words = torch.empty(2, dtype=torch.int64).random_(generator=torch.default_generator)
        seed, offset = (int(w) for w in words)
    state = torch.tensor([_to_int64(seed), _to_int64(offset)], dtype=torch.int64, device=device)
    return seed & _U64, offset & _U64, state


def unused(device):
    """rng_state of a call without dropout (no random number is drawn)."""
    return torch.zeros(2, dtype=torch.int64, device=device)


def replay(state):
    """(seed, offset) as unsigned 64-bit integers from an rng_state."""
    seed, offset = state.tolist()
    return int(seed) & _U64, int(offset) & _U64
