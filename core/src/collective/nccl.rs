//! NCCL backend (feature `nccl`): placeholder, filled below.
