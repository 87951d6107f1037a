"""``agentik bench``: load benchmarks of the agent, in process or over HTTP."""

from agentik._probe import ServerCheckError as ServerCheckError
from agentik._public import publish as _publish
from agentik.benchmark._run import BenchConfig as BenchConfig
from agentik.benchmark._run import BenchResult as BenchResult
from agentik.benchmark._run import format_table as format_table
from agentik.benchmark._run import run_bench as run_bench
from agentik.benchmark._scripted import bench_tool as bench_tool
from agentik.benchmark._scripted import workload_responder as workload_responder

__all__ = [
    "BenchConfig",
    "BenchResult",
    "ServerCheckError",
    "bench_tool",
    "format_table",
    "run_bench",
    "workload_responder",
]

_publish(globals(), __all__, __name__)
