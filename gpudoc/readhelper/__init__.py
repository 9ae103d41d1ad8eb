"""The reader helper: run by path in the job's own interpreter, it asks the installed framework
(Hydra's compose API, torchtune's config loader, jsonargparse for
LightningCLI and LitGPT) for the configuration the job will run with.
It imports installed frameworks only, never gpudoc nor the job's own modules."""
