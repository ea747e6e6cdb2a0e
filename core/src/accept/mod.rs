//! `fabric-check accept`: nccl-tests results and pinned BOMs in, an acceptance report out.
