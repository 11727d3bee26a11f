//! What any gRPC tool asks of a daemon without its protos: the standard
//! health check and server reflection (as `grpcurl` does).

use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

/// `grpc.health.v1.Health/Check` of `service` over `ch`.
pub async fn health(ch: Channel, service: &str) -> Result<ServingStatus, tonic::Status> {
    let r = HealthClient::new(ch).check(HealthCheckRequest { service: service.into() }).await?;
    Ok(r.into_inner().status())
}

/// The services server reflection (v1) lists over `ch`, and whether it
/// describes `symbol` (a service or message's full name).
pub async fn reflection(ch: Channel, symbol: &str) -> Result<(Vec<String>, bool), tonic::Status> {
    let ask = |m: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(m),
    };
    let requests = futures::stream::iter([
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(symbol.into())),
    ]);
    let mut answers = ServerReflectionClient::new(ch).server_reflection_info(requests).await?.into_inner();
    let mut services = vec![];
    let mut described = false;
    while let Some(a) = answers.message().await? {
        match a.message_response {
            Some(MessageResponse::ListServicesResponse(l)) => services = l.service.into_iter().map(|s| s.name).collect(),
            Some(MessageResponse::FileDescriptorResponse(f)) => described = !f.file_descriptor_proto.is_empty(),
            _ => {}
        }
    }
    services.sort();
    Ok((services, described))
}
