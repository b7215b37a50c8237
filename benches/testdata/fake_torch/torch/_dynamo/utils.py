"""Stand-in for torch._dynamo.utils: the counters torch.compile keeps."""
import collections

counters = collections.defaultdict(collections.Counter)
