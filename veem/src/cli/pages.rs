//! Whole lists from the VMI's paginated list calls (Google AIP-158): each
//! function asks page after page, of the VEEM's default size, until the
//! answer's `next_page_token` is empty.

use interfaces::pages::all;
use interfaces::vmi::{self, HostStatus, MigrationInfo, ServiceInfo, UsageLimitInfo, VeeInfo};
use tonic::Status;

use super::client::VmiServiceClient;

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

/// Every stored event the caller may see (of service `service_id` when
/// not empty) after the one of `seq` `after` (0: from the oldest the site
/// keeps), oldest first, read page after page (ListEvents), each given to
/// `each` as its page comes. Errors: the server's, `each`'s, or a server
/// that gives the same token again.
pub async fn events(
    c: &VmiServiceClient,
    service_id: &str,
    after: u64,
    mut each: impl FnMut(&vmi::Event) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let (mut c, mut token) = (c.clone(), String::new());
    loop {
        let req = vmi::ListEventsRequest {
            service_id: service_id.to_string(),
            page_token: token.clone(),
            // The first page only: the tokens go on from there.
            after_seq: if token.is_empty() { after } else { 0 },
            ..Default::default()
        };
        let page = c.list_events(req).await?.into_inner();
        page.events.iter().try_for_each(&mut each)?;
        if page.next_page_token.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(page.next_page_token != token, "the server gave the same page token twice");
        token = page.next_page_token;
    }
}
