/* The router's balancing losses on cases worked out by hand (core/transformer/moe/router.h):
 * two experts, one hidden unit, router weight [[1], [0]], so a token's logits are (x, 0) and its
 * softmax (e^x / (e^x + 1), 1 / (e^x + 1)). With x = ln 3 and ln 9 the scores are (3/4, 1/4)
 * and (9/10, 1/10): pre-softmax top-1 sends both tokens to expert 0 with gates 3/4 and 9/10.
 *   aux_loss  = E / (N^2 k) sum_e P_e tokens_e = 2/4 x ((3/4 + 9/10) x 2 + (1/4 + 1/10) x 0)
 *             = 1.65
 *   z_loss    = mean(lse^2) = (ln(4)^2 + ln(10)^2) / 2
 * and the aux loss's router gradient (coefficient c, no gate gradient): dL/dscore_ne =
 * c E tokens_e / (N^2 k) = (c, 0); through the softmax, token 0: (3/16 c, -3/16 c), token 1:
 * (9/100 c, -9/100 c); dW_0 = 3/16 c ln 3 + 9/100 c ln 9 = 0.3675 c ln 3, dW_1 = -dW_0. With
 * the tokens swapped between experts by x = -ln 3 for token 1, the routing balances: tokens
 * (1, 1), aux = 2/4 x ((3/4 + 1/4) + (1/4 + 3/4)) = 1, the Switch Transformer's minimum. */
#include <math.h>
#include <string.h>

#include "core/transformer/moe/router.h"
#include "core/transformer/moe/token_dispatcher.h"
#include "test_util.h"

static transformer_config config(void) {
    transformer_config c = {0};
    c.num_layers = 1;
    c.hidden_size = 1;
    c.moe.num_experts = 2;
    c.moe.ffn_hidden_size = 1;
    c.moe.topk = 1;
    c.moe.pre_softmax = 1;
    c.moe.aux_loss_coeff = 0.5f;
    c.moe.z_loss_coeff = 0.25f;
    c.moe.input_jitter_eps = -1.0f;
    c.moe.capacity_factor = -1.0f;
    c.moe.layer_freq = 1;
    c.moe.load_balancing = MOE_LB_AUX_LOSS;
    return c;
}

static void route(const transformer_config *c, const float *x, moe_routing *r) {
    const float w[2] = {1.0f, 0.0f};
    moe_routing_alloc(r, c, 1, 2);
    moe_router_forward(c, w, x, 1, (dropout_key){0}, r);
}

int main(void) {
    const transformer_config c = config();
    const double ln3 = log(3.0);
    /* both tokens to expert 0 */
    const float x[2] = {(float)ln3, (float)(2.0 * ln3)};
    moe_routing r;
    route(&c, x, &r);
    CHECK(r.idx[0] == 0 && r.idx[1] == 0);
    CHECK_CLOSE(r.gate[0], 0.75, 1e-6, 0);
    CHECK_CLOSE(r.gate[1], 0.9, 1e-6, 0);
    CHECK(r.tokens_per_expert[0] == 2 && r.tokens_per_expert[1] == 0);
    CHECK_CLOSE(r.aux_value, 1.65, 1e-6, 0);
    CHECK_CLOSE(r.aux_loss, 0.5 * 1.65, 1e-6, 0);
    const double z = (log(4.0) * log(4.0) + log(10.0) * log(10.0)) / 2.0;
    CHECK_CLOSE(r.z_value, z, 1e-6, 0);
    CHECK_CLOSE(r.z_loss, 0.25 * z, 1e-6, 0);
    /* the aux loss's gradient alone (no gate gradient, z-loss off) */
    transformer_config nz = c;
    nz.moe.z_loss_coeff = -1.0f;
    moe_routing_free(&r);
    route(&nz, x, &r);
    const float w[2] = {1.0f, 0.0f}, dgate[2] = {0.0f, 0.0f};
    float dx[2] = {0}, dw[2] = {0};
    moe_router_backward(&nz, w, x, &r, dgate, NULL, 1.0f, dx, dw);
    const double cc = 0.5, dw0 = 0.3675 * cc * ln3;
    CHECK_CLOSE(dw[0], dw0, 1e-5, 0);
    CHECK_CLOSE(dw[1], -dw0, 1e-5, 0);
    /* dx_n = dlogits_n . W = dlogits_n0: 3/16 c and 9/100 c */
    CHECK_CLOSE(dx[0], 3.0 / 16.0 * cc, 1e-5, 0);
    CHECK_CLOSE(dx[1], 9.0 / 100.0 * cc, 1e-5, 0);
    moe_routing_free(&r);
    /* balanced: one token each, the loss at its minimum 1 */
    const float xb[2] = {(float)ln3, (float)-ln3};
    route(&c, xb, &r);
    CHECK(r.idx[0] == 0 && r.idx[1] == 1);
    CHECK_CLOSE(r.aux_value, 1.0, 1e-6, 0);
    /* capacity 0.5: ceil(2 x 1 / 2 x 0.5) = 1 token per expert; drop by probs keeps token 1 (9/10)
     * of expert 0's two (the both-to-expert-0 routing) */
    transformer_config cap = c;
    cap.moe.capacity_factor = 0.5f;
    moe_routing_free(&r);
    route(&cap, x, &r);
    moe_assignment a;
    moe_assign(&cap, &r, &a);
    CHECK(a.capacity == 1 && a.R == 1 && a.token[0] == 1 && a.dropped == 1);
    CHECK(a.kept[0 * 2 + 0] == 0 && a.kept[1 * 2 + 0] == 1);
    moe_assignment_free(&a);
    moe_routing_free(&r);
    TEST_DONE();
}
