// Request headers that carry credentials beside the access token, named once:
// RequestState reads them, route declarations list them (for OpenAPI), and
// the services that check them find their values on the request context.

/** A request header an operation reads, as its declaration lists it for OpenAPI. */
export interface HeaderParameter {
  name: string;
  description: string;
  required?: boolean;
}

/** Profile session token (document 1 part 5.8): proof of a PIN-protected profile's PIN, from verify-pin. */
export const PROFILE_TOKEN_HEADER = 'X-Profile-Token';

/** Step-up token (document 2): proof of a second factor obtained in this session within its 300 seconds, from POST /v1/me/auth/mfa/verify. */
export const STEP_UP_TOKEN_HEADER = 'X-Step-Up-Token';

export const stepUpTokenHeader: HeaderParameter = {
  name: STEP_UP_TOKEN_HEADER,
  description: 'Step-up token from POST /v1/me/auth/mfa/verify (valid 300 s, in the session that obtained it)',
};

export const profileTokenHeader: HeaderParameter = {
  name: PROFILE_TOKEN_HEADER,
  description: 'Profile token from POST /v1/users/me/profiles/{profile_id}/verify-pin (valid 3600 s, in the session that obtained it); '
    + 'needed where the profile is PIN-protected',
};
