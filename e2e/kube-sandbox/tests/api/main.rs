//! Conformance-style tests of the sandbox API server over real HTTP, with the `kube` client
//! and raw requests for wire details. One test binary, one module per area.

mod common;

mod controller;
mod crd;
mod crud;
mod discovery;
mod faults;
mod gc;
mod patch;
mod rbac;
mod scale;
mod snapshot;
mod ssa;
mod watch;
