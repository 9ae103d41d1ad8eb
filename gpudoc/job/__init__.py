"""What gpudoc knows about the job from its command line: one reader, its facts, its interpreter."""

from gpudoc.job.argv import JobCommand, Options, parse_command
from gpudoc.job.identity import JobIdentity, World, is_multi_process, job_identity, node_rank, process_count, world

__all__ = ["JobCommand", "JobIdentity", "Options", "World", "is_multi_process", "job_identity", "node_rank",
           "parse_command", "process_count", "world"]
