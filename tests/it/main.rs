//! The one integration-test binary (one link step on 2 cores): a module per feature.

mod support;

// --- issue 7 ---
mod agent_bridge;
mod demo;
// --- end issue 7 ---
mod dispatch;
mod foundation;
mod ingress;
mod replies;
mod rls;
