from gpudoc.facts.environment import relevant_env


def test_only_the_variables_checks_read_are_kept():
    environ = {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "PYTORCH_ALLOC_CONF": "max_split_size_mb:128",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "CUDA_LAUNCH_BLOCKING": "1",
        "NCCL_ASYNC_ERROR_HANDLING": "1",
        "NCCL_DEBUG": "INFO",
        "TORCH_NCCL_BLOCKING_WAIT": "1",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "4",
        "SLURM_JOB_ID": "12345",
        "AWS_SECRET_ACCESS_KEY": "do-not-copy",
        "HF_TOKEN": "hf_secret",
        "PATH": "/usr/bin",
        "HOME": "/home/u",
    }
    kept = relevant_env(environ)
    assert set(kept) == set(environ) - {"AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "PATH", "HOME"}
    assert kept["NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert list(kept) == sorted(kept)  # stable output


def test_empty_environment():
    assert relevant_env({}) == {}
