//! Helpers shared by the tests that meet for real (each test file uses what it needs).
#![allow(dead_code)]

pub mod loopback;
pub mod munged;
pub mod ports;
