#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| vee_fuzz::vmi_rest(data));
