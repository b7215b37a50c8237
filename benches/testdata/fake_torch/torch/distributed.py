"""torch.distributed of the stand-in torch: a world of one."""


class DistNetworkError(Exception):
    pass


def init_process_group(*args, **kwargs):
    pass


def get_rank():
    return 0


def get_world_size():
    return 1


def all_gather_into_tensor(*args):
    pass


barrier = destroy_process_group = all_gather_into_tensor

