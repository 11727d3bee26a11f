#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| vee_fuzz::domain_xml(data));
