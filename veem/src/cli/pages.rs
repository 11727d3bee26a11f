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
