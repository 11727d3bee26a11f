//! What the VEEM's interfaces share (issue 37: conversions between the
//! VMI's messages and what users read happen here, never in workflows):
//! today the one JSON shape of the VMI's records that the CLI prints
//! (`-o json`), REST answers and a console would show ([`model`]).

pub mod model;
