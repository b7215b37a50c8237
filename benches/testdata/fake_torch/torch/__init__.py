"""A stand-in for torch with just enough of its surface to run the examples' control flow
without a GPU (tests of benches/record_overhead.py): it checks that the JSON the examples write
is what the bench reads. Its "CUDA events" advance a fake clock by $FAKE_TORCH_EVENT_US (default
20) per record, and 5 µs more while torch.profiler is on; nothing here measures anything."""
import contextlib
import os

from . import distributed  # noqa: F401  (torch.distributed)

__version__ = "0.0-fake"
half = bfloat16 = long = "dtype"
_clock_ns = [0]
_step_ns = [round(1000 * float(os.environ.get("FAKE_TORCH_EVENT_US", "20")))]


class _Tensor:
    def __getattr__(self, name):
        return lambda *args, **kwargs: _Tensor()

    def __matmul__(self, other):
        return _Tensor()

    __add__ = __mul__ = __truediv__ = __matmul__

    def __getitem__(self, key):
        return _Tensor()


def _tensor(*args, **kwargs):
    return _Tensor()


randn = empty = empty_like = zeros = relu = matmul = add = _tensor


def device(*args):
    return args


def no_grad():
    return lambda fn: fn


def compile(fn, **kwargs):
    return fn


class _Event:
    def __init__(self, **kwargs):
        self.at_ns = 0

    def record(self, *stream):
        _clock_ns[0] += _step_ns[0]
        self.at_ns = _clock_ns[0]

    def elapsed_time(self, later):
        return (later.at_ns - self.at_ns) / 1e6


class _Graph:
    def replay(self):
        pass


class _Nvtx:
    @staticmethod
    def range(name):
        return contextlib.nullcontext()

    range_push = range_pop = staticmethod(lambda *args: None)


class _Nccl:
    @staticmethod
    def version():
        return (0, 0, 0)


class cuda:
    Event = _Event
    CUDAGraph = _Graph
    Stream = _Tensor
    nvtx = _Nvtx
    nccl = _Nccl
    synchronize = set_device = staticmethod(lambda *args: None)
    get_device_name = staticmethod(lambda: "fake")
    current_stream = staticmethod(_tensor)
    stream = graph = staticmethod(lambda *args: contextlib.nullcontext())


class nn:
    class Module:
        def __init__(self, *args):
            pass

        def cuda(self):
            return self

        half = eval = cuda

        def __call__(self, x):
            return _Tensor()

    Linear = GELU = Sequential = Module


class profiler:
    class ProfilerActivity:
        CPU = CUDA = None

    @staticmethod
    @contextlib.contextmanager
    def profile(**kwargs):
        _step_ns[0] += 5000
        try:
            yield
        finally:
            _step_ns[0] -= 5000
