//! A WebSocket text frame from a client: `parse_client_frame`, then `connect_params::parse` of its params.
//! Properties: a frame that parses re-encodes (`ClientFrame::to_json`) to text that parses to an equal frame;
//! a refusal always says why; heap use stays linear in the frame's size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::gateway::connect_params;
use pincer::gateway::frames::{parse_client_frame, ClientFrame};
use pincer_fuzz::{linear_budget, within_budget};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let budget = linear_budget(text.len(), 64, 64 * 1024);
    within_budget("gateway frame", budget, || match parse_client_frame(text) {
        Ok(frame) => {
            let again = parse_client_frame(&frame.to_json().to_string())
                .expect("a re-encoded frame parses");
            assert_eq!(again, frame, "re-encoding changed the frame");
            if let ClientFrame::Request(request) = &frame {
                if let Err(message) = connect_params::parse(&request.params) {
                    assert!(!message.is_empty(), "a refused connect says why");
                }
            }
        }
        Err(error) => assert!(!error.message.is_empty(), "a refused frame says why"),
    });
});
