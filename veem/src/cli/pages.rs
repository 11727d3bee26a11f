//! Whole lists from the VMI's paginated list calls (Google AIP-158): each
//! function asks page after page, of the VEEM's default size, until the
//! answer's `next_page_token` is empty.

use std::future::Future;

use interfaces::vmi::{self, HostStatus, MigrationInfo, ServiceInfo, UsageLimitInfo, VeeInfo};
use tonic::{Response, Status};

use super::client::VmiServiceClient;

/// Every item of a list: `call` asks for the page of a token (empty: the
/// first), `split` takes a page's items and the next token. Errors: the
/// VEEM's, or a VEEM that gives the same token again (it would never end).
async fn all<R, T, Fut>(mut call: impl FnMut(String) -> Fut, split: impl Fn(R) -> (Vec<T>, String)) -> Result<Vec<T>, Status>
where
    Fut: Future<Output = Result<Response<R>, Status>>,
{
    let (mut items, mut token) = (Vec::new(), String::new());
    loop {
        let (mut page, next) = split(call(token.clone()).await?.into_inner());
        items.append(&mut page);
        if next.is_empty() {
            return Ok(items);
        }
        if next == token {
            return Err(Status::internal("the VEEM gave the same page token twice"));
        }
        token = next;
    }
}

/// Every service the caller may see.
pub async fn services(c: &VmiServiceClient) -> Result<Vec<ServiceInfo>, Status> {
    let call = |page_token| {
        let mut c = c.clone();
        async move { c.list_services(vmi::ListServicesRequest { page_size: 0, page_token }).await }
    };
    all(call, |r| (r.services, r.next_page_token)).await
}

/// The VEEs of service `service_id` (empty: every VEE the caller may see).
pub async fn vees(c: &VmiServiceClient, service_id: &str) -> Result<Vec<VeeInfo>, Status> {
    let call = |page_token| {
        let (mut c, service_id) = (c.clone(), service_id.to_string());
        async move {
            c.list_vees(vmi::ListVeesRequest {
                service_id,
                page_size: 0,
                page_token,
            })
            .await
        }
    };
    all(call, |r| (r.vees, r.next_page_token)).await
}

/// Every migration the caller may see, oldest first.
pub async fn migrations(c: &VmiServiceClient) -> Result<Vec<MigrationInfo>, Status> {
    let call = |page_token| {
        let mut c = c.clone();
        async move { c.list_migrations(vmi::ListMigrationsRequest { page_size: 0, page_token }).await }
    };
    all(call, |r| (r.migrations, r.next_page_token)).await
}

/// The site's hosts (the operator only).
pub async fn hosts(c: &VmiServiceClient) -> Result<Vec<HostStatus>, Status> {
    let call = |page_token| {
        let mut c = c.clone();
        async move { c.list_hosts(vmi::ListHostsRequest { page_size: 0, page_token }).await }
    };
    all(call, |r| (r.hosts, r.next_page_token)).await
}

/// The usage limits the caller may see.
pub async fn usage_limits(c: &VmiServiceClient) -> Result<Vec<UsageLimitInfo>, Status> {
    let call = |page_token| {
        let mut c = c.clone();
        async move { c.list_usage_limits(vmi::ListUsageLimitsRequest { page_size: 0, page_token }).await }
    };
    all(call, |r| (r.limits, r.next_page_token)).await
}
