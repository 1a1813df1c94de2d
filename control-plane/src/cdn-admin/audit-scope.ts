// Which audit entries the CDN audit log shows: those about the resources of
// document 3 and about CDN administration (admin users, API tokens). Entries
// about accounts (users, profiles, payments...) stay out: the CDN list must
// not show account-side personal data. A capability adding a CDN resource
// type adds its `resource_type` here.
export const CDN_AUDIT_RESOURCE_TYPES = [
  // document 3 resources (the CDN management capability writes these)
  'endpoint', 'origin', 'route', 'cache_rule', 'purge_request', 'prefetch_job', 'custom_domain', 'certificate',
  'response_headers_policy', 'signing_key', 'ip_rule', 'log_drain', 'config_version', 'edge_node', 'agent_token',
  // CDN administration (this capability)
  'admin_user', 'api_token',
] as const;
