//! gapscope: where did my graphed step lose time, and did the fix remove it?
//!
//! Data flows one way: recording (`cupti`, `runner`) → [`trace`] → [`analysis`] → [`report`].
//! Everything from [`trace`] on is safe Rust and runs without a GPU.

pub mod analysis;
pub mod bundled;
pub mod cupti;
pub mod import;
pub mod inject;
pub mod merge;
pub mod record;
pub mod report;
pub mod runner;
pub mod synthetic;
pub mod trace;
