// Gift cards and the account balance (document 1 §4.5; DESIGN.md §5, §6):
// look up and redeem for subscribers (rate-limited against guessing), the
// caller's balance, and the administrators' create, list, read and disable.
import { z } from 'zod';
import { paginate } from '../http/paging.ts';
import { data, list, page, reply, type RateLimitRule } from '../http/route.ts';
import { pageQuery, uuid } from '../http/schemas.ts';
import { balancesOf } from './balance-service.ts';
import { GIFT_CARD_CODE_LENGTH, normaliseGiftCardCode } from './codes.ts';
import {
  adminGiftCardRecord, adminGiftCardResource, balanceRecord, createGiftCardBody, giftCardRecord, presentBalance, presentGiftCard,
} from './gift-card-record.ts';
import { createGiftCard, disableGiftCard, findGiftCard, hashOfTypedCode, lookUpGiftCard, redeemGiftCard } from './gift-card-service.ts';
import { GIFT_CARD_STATUSES, GiftCard } from './gift-card.entity.ts';
import { currencyField } from './money-fields.ts';
import { defineBillingRoute as defineRoute, type BillingServices } from './services.ts';

const tags = ['Gift cards'];
const adminTags = ['Administration: gift cards'];
const read = { permission: 'admin.billing.read' } as const;
const manage = { permission: 'admin.billing.manage' } as const;
const cardParams = z.strictObject({ gift_card_id: uuid() });
const codeText = () => z.string().trim().min(1).max(64);

/**
 * One budget for looking up and redeeming codes, per caller and per address:
 * codes carry 80 random bits, and the budget keeps a leaked partial code or a
 * scripted guesser from trying many.
 */
export const GIFT_CARD_CODE_LIMITS: RateLimitRule<BillingServices>[] = [
  { name: 'gift-card-code:caller', limit: 20, windowSeconds: 3600, by: 'caller' },
  { name: 'gift-card-code:ip', limit: 60, windowSeconds: 3600, by: 'ip' },
];
const limitsText = `Looking up and redeeming share a budget of ${GIFT_CARD_CODE_LIMITS[0]!.limit} codes per hour per caller `
  + `and ${GIFT_CARD_CODE_LIMITS[1]!.limit} per address (429 RATE_LIMITED with Retry-After).`;
const codeRules = `A code is ${GIFT_CARD_CODE_LENGTH} characters, usually written XXXX-XXXX-XXXX-XXXX; case, spaces and dashes do not matter, and O, I and L are read as 0, 1 and 1.`;

export const lookUpGiftCardRoute = defineRoute({
  method: 'get', path: '/v1/gift-cards/:code', tags, access: { permission: 'gift_cards.read', resourceType: 'user' },
  summary: 'Look up a gift card by its code',
  description: `Shows the card's value and status before redeeming it. ${codeRules} A code that is no card is a 404. ${limitsText}`,
  params: z.strictObject({ code: codeText() }),
  rateLimits: GIFT_CARD_CODE_LIMITS,
  responses: { 200: data(giftCardRecord) },
  async handler({ params, rc, app }) {
    const { card, code } = await lookUpGiftCard(app, rc, params.code);
    return presentGiftCard(card, { now: app.clock.now(), code, viewerId: rc.actor!.id });
  },
});

export const redeemGiftCardRoute = defineRoute({
  method: 'post', path: '/v1/gift-cards/redeem', tags, access: { permission: 'gift_cards.redeem', resourceType: 'user' },
  summary: 'Redeem a gift card into my account balance',
  description: 'Moves the card\'s whole value into the caller\'s account balance in the card\'s currency (see GET /v1/users/me/balance), '
    + 'where later invoices in that currency draw on it. A card is redeemed once: a redeemed, disabled or expired card is a 409 CONFLICT with '
    + `\`error_code\` already_redeemed, disabled or expired. Send an Idempotency-Key to retry safely. ${codeRules} ${limitsText}`,
  body: z.strictObject({ code: codeText() }),
  idempotent: true,
  rateLimits: GIFT_CARD_CODE_LIMITS,
  responses: { 200: data(giftCardRecord) },
  errors: ['CONFLICT'],
  async handler({ body, rc, app }) {
    const { card, code } = await redeemGiftCard(app, rc, body.code);
    return presentGiftCard(card, { now: app.clock.now(), code, viewerId: rc.actor!.id });
  },
});

export const readBalanceRoute = defineRoute({
  method: 'get', path: '/v1/users/me/balance', tags, access: { permission: 'users.read', resourceType: 'user' },
  summary: 'Read my account balance',
  description: 'One balance per currency the account has held money in (redeemed gift cards), by currency code. Balances are never converted between currencies.',
  responses: { 200: list(balanceRecord) },
  async handler({ rc }) {
    return (await balancesOf(rc.em, rc.actor!.id)).map(presentBalance);
  },
});

export const listGiftCardsRoute = defineRoute({
  method: 'get', path: '/v1/admin/gift-cards', tags: adminTags, access: read,
  summary: 'List gift cards',
  description: 'Newest first. Codes are masked (only a hash is stored); `code` finds the card with that full code. `status` filters by the status shown.',
  query: pageQuery({
    status: z.enum(GIFT_CARD_STATUSES).optional(),
    currency: currencyField().optional(),
    code: codeText().refine((v) => normaliseGiftCardCode(v) !== null, `Must be a whole gift card code (${GIFT_CARD_CODE_LENGTH} characters)`).optional(),
    redeemed_by: uuid().optional(),
  }),
  responses: { 200: page(adminGiftCardRecord) },
  async handler({ query, rc, app }) {
    const now = app.clock.now();
    const where: Record<string, unknown> = {};
    if (query.status === 'active') Object.assign(where, { status: 'active', $or: [{ expires_at: null }, { expires_at: { $gt: now } }] });
    else if (query.status === 'expired') Object.assign(where, { status: 'active', expires_at: { $lte: now } });
    else if (query.status) where.status = query.status;
    if (query.currency) where.currency = query.currency;
    if (query.redeemed_by) where.redeemed_by = query.redeemed_by;
    if (query.code) where.code_hash = hashOfTypedCode(app, query.code)!.hash;
    const found = await paginate(rc.em, GiftCard, { where, limit: query.limit, cursor: query.cursor, sort: { field: 'created_at', direction: 'desc' } });
    return { items: found.items.map((c) => presentGiftCard(c, { now })), meta: found.meta };
  },
});

export const createGiftCardRoute = defineRoute({
  method: 'post', path: '/v1/admin/gift-cards', tags: adminTags, access: manage,
  summary: 'Create a gift card',
  description: `The server makes the code (${GIFT_CARD_CODE_LENGTH} characters of Crockford base32, 80 random bits), shown in full in this answer only: `
    + 'afterwards it is masked to its last four characters, since only a hash of it is stored. Audit-logged with the acting administrator.',
  body: createGiftCardBody,
  responses: { 201: data(adminGiftCardResource) },
  async handler({ body, rc, app }) {
    const { card, code } = await createGiftCard(app, rc, body);
    return reply.created(presentGiftCard(card, { now: app.clock.now(), code }), `/v1/admin/gift-cards/${card.id}`);
  },
});

export const readGiftCardRoute = defineRoute({
  method: 'get', path: '/v1/admin/gift-cards/:gift_card_id', tags: adminTags, access: read,
  summary: 'Read a gift card', description: 'The code is masked to its last four characters.',
  params: cardParams,
  responses: { 200: data(adminGiftCardResource) },
  async handler({ params, rc, app }) {
    return presentGiftCard(await findGiftCard(rc.em, params.gift_card_id), { now: app.clock.now() });
  },
});

export const disableGiftCardRoute = defineRoute({
  method: 'delete', path: '/v1/admin/gift-cards/:gift_card_id', tags: adminTags, access: manage,
  summary: 'Disable a gift card',
  description: 'Answers the card with status disabled: it can no longer be redeemed. A redeemed card cannot be disabled (409 CONFLICT: its value is '
    + 'already in a balance). Cards are never deleted. Audit-logged with the acting administrator.',
  params: cardParams,
  responses: { 200: data(adminGiftCardResource) },
  errors: ['CONFLICT'],
  async handler({ params, rc, app }) {
    return presentGiftCard(await disableGiftCard(app, rc, params.gift_card_id), { now: app.clock.now() });
  },
});

export const giftCardRoutes = [
  lookUpGiftCardRoute, redeemGiftCardRoute, readBalanceRoute, listGiftCardsRoute, createGiftCardRoute, readGiftCardRoute, disableGiftCardRoute,
];
