//! `wifi.json5` from the boot partition: its fields checked (each error names the
//! field), and the wpa_supplicant config for `wpa_supplicant@wlan0` it becomes.

use serde_json::Value;

/// The keys `wifi.json5` may carry.
const KNOWN_KEYS: [&str; 4] = ["ssid", "password", "country", "hidden"];

/// One Wi-Fi network to join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WifiSettings {
    pub ssid: String,
    /// `None`: an open network.
    pub password: Option<String>,
    /// ISO 3166 alpha-2, upper case.
    pub country: String,
    pub hidden: bool,
}

/// Parses and checks `wifi.json5`'s text; errors name the field and what is allowed.
pub fn parse(text: &str) -> Result<WifiSettings, String> {
    let value = crate::config::parse_json5(text, "wifi.json5").map_err(|e| e.to_string())?;
    let Value::Object(map) = value else {
        return Err(
            "wifi.json5: expected an object like { ssid: \"…\", password: \"…\", country: \"GB\" }"
                .into(),
        );
    };
    if let Some(unknown) = map.keys().find(|k| !KNOWN_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "wifi.json5: unknown key {unknown} (known: {})",
            KNOWN_KEYS.join(", ")
        ));
    }
    let string = |key: &str| -> Result<Option<String>, String> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("wifi.json5: {key}: expected a string, got {other}")),
        }
    };
    let ssid = string("ssid")?.ok_or("wifi.json5: ssid: required (the network's name)")?;
    if ssid.is_empty() || ssid.len() > 32 {
        return Err(format!(
            "wifi.json5: ssid: expected 1 to 32 bytes, got {}",
            ssid.len()
        ));
    }
    let password = string("password")?.filter(|p| !p.is_empty());
    if let Some(password) = &password {
        check_password(password)?;
    }
    let country = string("country")?
        .ok_or(
            "wifi.json5: country: required (two letters, ISO 3166, e.g. \"GB\", \"US\", \"DE\")",
        )?
        .to_ascii_uppercase();
    if country.len() != 2 || !country.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!(
            "wifi.json5: country: expected two letters (ISO 3166, e.g. \"GB\"), got {country:?}"
        ));
    }
    let hidden = match map.get("hidden") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "wifi.json5: hidden: expected true or false, got {other}"
            ))
        }
    };
    Ok(WifiSettings {
        ssid,
        password,
        country,
        hidden,
    })
}

fn check_password(password: &str) -> Result<(), String> {
    let is_hex_key = password.len() == 64 && password.bytes().all(|b| b.is_ascii_hexdigit());
    let is_passphrase =
        (8..=63).contains(&password.len()) && password.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if is_hex_key || is_passphrase {
        Ok(())
    } else {
        Err(format!(
            "wifi.json5: password: expected a WPA passphrase of 8 to 63 printable ASCII characters \
             or 64 hex digits, got {} characters",
            password.chars().count()
        ))
    }
}

impl WifiSettings {
    /// The wpa_supplicant config. The SSID is written in hex (any bytes, no quoting); a
    /// passphrase in quotes (wpa_supplicant reads up to the line's last quote), a
    /// 64-digit key bare.
    pub fn wpa_supplicant_conf(&self) -> String {
        let mut network = format!("\tssid={}\n", hex::encode(self.ssid.as_bytes()));
        if self.hidden {
            network.push_str("\tscan_ssid=1\n");
        }
        match &self.password {
            None => network.push_str("\tkey_mgmt=NONE\n"),
            Some(key) if key.len() == 64 => {
                network.push_str(&format!("\tkey_mgmt=WPA-PSK\n\tpsk={key}\n"))
            }
            Some(passphrase) => {
                network.push_str(&format!("\tkey_mgmt=WPA-PSK\n\tpsk=\"{passphrase}\"\n"))
            }
        }
        format!(
            "# Written by `pincer firstboot` from wifi.json5 on the boot partition.\n\
             ctrl_interface=DIR=/run/wpa_supplicant GROUP=netdev\n\
             update_config=0\n\
             country={}\n\
             network={{\n{network}}}\n",
            self.country
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wpa_network_becomes_a_psk_block_with_the_ssid_in_hex() {
        let settings =
            parse(r#"{ ssid: "Home \"net\"", password: "correct horse", country: "gb" }"#)
                .expect("valid");
        assert_eq!(settings.country, "GB");
        let conf = settings.wpa_supplicant_conf();
        assert!(conf.contains("country=GB\n"), "{conf}");
        assert!(
            conf.contains(&format!("ssid={}\n", hex::encode("Home \"net\""))),
            "{conf}"
        );
        assert!(
            conf.contains("key_mgmt=WPA-PSK\n\tpsk=\"correct horse\"\n"),
            "{conf}"
        );
        assert!(!conf.contains("scan_ssid"), "{conf}");
    }

    #[test]
    fn open_hidden_and_hex_key_networks() {
        let open = parse(r#"{ ssid: "cafe", country: "DE", hidden: true }"#).expect("valid");
        let conf = open.wpa_supplicant_conf();
        assert!(conf.contains("key_mgmt=NONE"), "{conf}");
        assert!(conf.contains("scan_ssid=1"), "{conf}");
        let key = "ab".repeat(32);
        let hex_key = parse(&format!(
            r#"{{ ssid: "x", password: "{key}", country: "US" }}"#
        ))
        .expect("valid");
        assert!(hex_key
            .wpa_supplicant_conf()
            .contains(&format!("psk={key}\n")));
    }

    #[test]
    fn bad_fields_are_named() {
        for (text, field) in [
            (r#"{ password: "12345678", country: "GB" }"#, "ssid"),
            (
                r#"{ ssid: "x", password: "short", country: "GB" }"#,
                "password",
            ),
            (r#"{ ssid: "x", password: "12345678" }"#, "country"),
            (r#"{ ssid: "x", country: "GBR" }"#, "country"),
            (r#"{ ssid: "x", country: "GB", hidden: "yes" }"#, "hidden"),
            (
                r#"{ ssid: "x", country: "GB", psk: "12345678" }"#,
                "unknown key psk",
            ),
            (r#"{ ssid: "#, "syntax error"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(field), "{text}: {err}");
        }
    }
}
