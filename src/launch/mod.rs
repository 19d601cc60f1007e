//! The launch round: scheduling trials over the hosts' slots and running
//! them through the transports ([`crate::transport`]).
//!
//! A launch round is three layers: [`schedule`] decides what runs where and
//! when (synchronous, no I/O); [`run_trial`] runs one trial (lease,
//! transport, judging, the attempt record); [`run_study`] drives workers
//! over the hosts' slots between the two. They report what happens as
//! typed [`events`], which [`progress`] alone turns into text. [`prior`]
//! is `--seed-from`: what an earlier study says about the same knobs.

pub mod events;
pub mod launcher;
pub mod prior;
pub mod progress;
pub mod run_study;
pub mod run_trial;
pub mod schedule;
