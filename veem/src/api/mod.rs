//! The VEEM's interfaces (issue 37: conversions between the VMI's
//! messages and the domain's records happen here): the VMI's gRPC server
//! ([`server`]: roles, the records as VMI messages, pages), its REST layer
//! ([`rest`]), what every request on the port passes first ([`front`]),
//! what the port answers while this VEEM stands by for its site's leader
//! ([`standby`]), what each role may see ([`visibility`]), the one map of errors to
//! status codes ([`status`]), and the one JSON shape of the VMI's records
//! that the CLI prints (`-o json`), REST answers and a console would show
//! ([`model`]).

pub mod front;
pub mod metrics;
pub mod model;
pub mod rest;
pub mod server;
pub mod standby;
pub mod status;
pub mod visibility;
pub mod web;
