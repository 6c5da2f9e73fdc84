-- pgbench script: the receiver's statement (OutboxStatements.insert), 100 notifications of
-- Apple's types per statement, run as a member of siwa_receiver (bench/receiver-insert).
INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
SELECT md5(random()::text || g), 'com.example.app', '000739.' || md5(random()::text) || '.2105',
       (ARRAY['email-disabled', 'email-enabled', 'consent-revoked', 'account-delete'])[1 + g % 4],
       clock_timestamp() - g * interval '1 ms', NULL, NULL, 'pending',
       '{"iss":"https://appleid.apple.com","aud":"com.example.app","iat":1752572197,"jti":"8sIboCeUBQuZ0M7x91YKZQ","events":"{\"type\":\"consent-revoked\"}"}'
FROM generate_series(1, 100) g
ORDER BY 3
ON CONFLICT DO NOTHING
RETURNING jti;
