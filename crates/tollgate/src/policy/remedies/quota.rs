//! Quotas: long windows (a day, or a calendar month renewing on a given day in a time
//! zone) and parent/child allocation (a child gets a share of its parent; a request must
//! fit both). Over quota: 429 `quota_exceeded` with `Retry-After` to the renewal.

use super::rate_limit::refusal;
use crate::body::Body;
use crate::error::{ProxyError, Reject};
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Exchange, Flow, Remedy, Stage};
use crate::policy::limit::Limit;
use http::Response;
use std::sync::Arc;

pub struct QuotaResource {
    pub name: Arc<str>,
    pub what: String,
    pub limit: Arc<Limit>,
    /// `tollgate_quota_remaining{quota}`, set as requests are counted.
    pub remaining: prometheus_client::metrics::gauge::Gauge,
}

pub struct Quota {
    pub resource: Arc<QuotaResource>,
    pub actions: Actions<Action>,
}

crate::policy::actions::actions! {
    /// What a quota did with a request.
    pub enum Action for "quota" {
        Allowed = "allowed",
        Rejected = "rejected",
        Refunded = "refunded",
    }
}

impl Remedy for Quota {
    fn stage(&self) -> Stage {
        Stage::Quota
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let r = &self.resource;
            match r.limit.take(&x.parts.headers).await {
                Ok(t) => {
                    r.remaining.set(t.remaining as i64);
                    self.actions.record(x, Action::Allowed);
                    if !t.counted.is_empty() {
                        x.refunds.push((Stage::Quota, t.counted));
                    }
                    Ok(Flow::Continue)
                }
                Err(refused) => {
                    r.remaining.set(0);
                    self.actions.record(x, Action::Rejected);
                    Err(refusal(Reject::QuotaExceeded, &r.what, &refused))
                }
            }
        })
    }

    fn response(&self, x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        if super::rate_limit::refund(x, Stage::Quota, &self.resource.limit, resp.status()) {
            self.actions.record(x, Action::Refunded);
        }
        resp
    }
}
