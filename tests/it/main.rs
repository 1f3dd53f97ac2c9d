//! The one integration-test binary (one link step on 2 cores): a module per feature.

mod support;

mod admin;
mod admin_cli;
mod agent_bridge;
mod async_answers;
mod citus;
mod console;
mod console_handoff;
mod console_overview;
mod contract;
mod demo;
mod dispatch;
mod dispatcher;
mod edges;
mod egress;
mod formatting;
mod foundation;
mod handoff;
mod history_scope;
mod ingress;
mod ingress_batch;
mod lifecycle;
mod media;
mod observability;
mod proactive;
mod queue_generations;
mod replies;
mod rls;
mod runtime_role;
mod secrets;
mod send_fixture;
mod slack_in_doubt;
mod streaming;
mod traces;
mod typing;
