//! The queue's depth and oldest age as gauges; per tenant only for the
//! `CB_METRICS_TOP_TENANTS` deepest queues, to bound the labels.

use std::time::Duration;

use tokio::sync::watch;

use crate::db::queue::TenantQueueStats;
use crate::dispatch::Worker;
use crate::domain::TenantId;

const STATS_EVERY: Duration = Duration::from_secs(10);

pub(super) async fn report(worker: &Worker, mut stop: watch::Receiver<bool>) {
    let top = worker.settings().metrics_top_tenants;
    let mut published: Vec<TenantId> = Vec::new();
    while !*stop.borrow() {
        let deadline = worker.settings().database.deadline();
        if let Ok(stats) = crate::db::within(deadline, worker.queue().stats()).await {
            metrics::gauge!("channel_bridge_dispatch_queue_depth").set(stats.depth as f64);
            metrics::gauge!("channel_bridge_dispatch_queue_oldest_age_seconds").set(stats.oldest_age_secs);
        }
        if top > 0 {
            let tenants = worker.queue().tenant_stats(top);
            if let Ok(tenants) = crate::db::within(deadline, tenants).await {
                published = publish_tenants(&published, tenants);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(STATS_EVERY) => {}
            _ = stop.changed() => {}
        }
    }
}

/// A tenant that left the top is set to zero. Returns the tenants now published.
fn publish_tenants(published: &[TenantId], tenants: Vec<TenantQueueStats>) -> Vec<TenantId> {
    for gone in published
        .iter()
        .filter(|t| !tenants.iter().any(|s| s.tenant_id == **t))
    {
        metrics::gauge!("channel_bridge_dispatch_tenant_queue_depth", "tenant" => gone.to_string()).set(0.0);
        metrics::gauge!("channel_bridge_dispatch_tenant_queue_oldest_age_seconds", "tenant" => gone.to_string())
            .set(0.0);
    }
    for stats in &tenants {
        let tenant = stats.tenant_id.to_string();
        metrics::gauge!("channel_bridge_dispatch_tenant_queue_depth", "tenant" => tenant.clone())
            .set(stats.depth as f64);
        metrics::gauge!("channel_bridge_dispatch_tenant_queue_oldest_age_seconds", "tenant" => tenant)
            .set(stats.oldest_age_secs);
    }
    tenants.into_iter().map(|s| s.tenant_id).collect()
}
