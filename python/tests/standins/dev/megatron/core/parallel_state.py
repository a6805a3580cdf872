"""Stand-in for megatron.core.parallel_state (dev): the dynamic-CP groups it creates."""


def dynamic_cp_group_sizes(world: int, min_cp_size: int = 1) -> list[int]:
    """Sizes of the groups created at start-up: powers of two 2^i with i below
    floor(log2(world)) and 2^i >= min_cp_size, then the group of all `world` GPUs."""
    log = world.bit_length() - 1
    sizes = [2**i for i in range(log) if 2**i >= min_cp_size]
    if world not in sizes:
        sizes.append(world)
    return sizes


def group_ranks(world: int, size: int, rank: int, min_cp_size: int = 1) -> list[int]:
    """The GPUs of the created group of `size` that holds `rank`: aligned blocks of `size`, or
    all of them; KeyError for a size no group was created for, as Megatron's lookup fails."""
    if size not in dynamic_cp_group_sizes(world, min_cp_size):
        raise KeyError(f"no dynamic CP group of size {size} on {world} GPUs")
    if size == world:
        return list(range(world))
    first = rank // size * size
    return list(range(first, first + size))
