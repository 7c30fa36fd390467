// The regularized incomplete beta function I_x(a, b) and its inverse, for the Clopper-Pearson
// bounds of the reliability bins (FORMAT.md, metrics.json `estimators`, kind `bin-intervals`):
// lower = the alpha/2 quantile of Beta(k, n - k + 1), upper = the 1 - alpha/2 quantile of
// Beta(k + 1, n - k), with lower 0 at k = 0 and upper 1 at k = n.
//
// I_x(a, b) by its continued fraction (modified Lentz), on the side x < (a + 1) / (a + b + 2)
// where it converges fast, and by symmetry on the other. The prefactor x^a (1 - x)^b / (a B(a, b))
// is taken in logarithms; for large a and b (bins of tens of thousands of rows) the log-beta is
// Stirling's series arranged so that the large terms cancel exactly (no lgamma(50000) - ...).
// The inverse: Newton steps inside a bracket that only shrinks, with bisection whenever a step
// leaves it, until the bracket cannot be halved any further.

const LOG_SQRT_2PI = 0.9189385332046728;
const LANCZOS_G = 7;
const LANCZOS = [
  0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
  12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
];

/** log Gamma(x) for x > 0 (Lanczos, g = 7; for x >= 10 Stirling's series with its remainder). */
export function logGamma(x) {
  if (x >= 10) return (x - 0.5) * Math.log(x) - x + LOG_SQRT_2PI + stirlingRemainder(x);
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  const t = x - 1;
  let s = LANCZOS[0];
  for (let i = 1; i < LANCZOS_G + 2; i++) s += LANCZOS[i] / (t + i);
  const w = t + LANCZOS_G + 0.5;
  return LOG_SQRT_2PI + (t + 0.5) * Math.log(w) - w + Math.log(s);
}

/** log Gamma(x) - ((x - 1/2) log x - x + log sqrt(2 pi)) for x >= 10 (Stirling's series). */
function stirlingRemainder(x) {
  const r = 1 / (x * x);
  return (1 / x) * (1 / 12 - r * (1 / 360 - r * (1 / 1260 - r * (1 / 1680 - r * (1 / 1188)))));
}

/** log(x^a (1 - x)^b / B(a, b)), the prefactor's logarithm, 0 < x < 1. */
function logPrefactor(x, a, b) {
  if (a >= 10 && b >= 10) {
    // -log B(a, b) = a log((a+b)/a) + b log((a+b)/b) + log sqrt(ab/(a+b)) - log sqrt(2 pi) + remainders;
    // with x^a (1-x)^b the large terms pair up: a log(x (a+b)/a) + b log((1-x)(a+b)/b).
    const c = a + b;
    const u = (c * x - a) / a; // x (a+b)/a - 1
    const v = (a - c * x) / b; // (1-x)(a+b)/b - 1
    return a * Math.log1p(u) + b * Math.log1p(v) + 0.5 * Math.log((a / c) * b) - LOG_SQRT_2PI
      - stirlingRemainder(a) - stirlingRemainder(b) + stirlingRemainder(c);
  }
  return a * Math.log(x) + b * Math.log1p(-x) - (logGamma(a) + logGamma(b) - logGamma(a + b));
}

const TINY = 1e-300;

/** The continued fraction of I_x(a, b) (modified Lentz). */
function fraction(x, a, b) {
  const qab = a + b;
  const qap = a + 1;
  const qam = a - 1;
  let c = 1;
  let d = 1 - (qab * x) / qap;
  if (Math.abs(d) < TINY) d = TINY;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= 100000; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < TINY) d = TINY;
    c = 1 + aa / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (qab + m) * x) / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < TINY) d = TINY;
    c = 1 + aa / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-16) return h;
  }
  return h;
}

/** I_x(a, b), the regularized incomplete beta function, a, b > 0, 0 <= x <= 1. */
export function betaInc(x, a, b) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  if (x < (a + 1) / (a + b + 2)) return (Math.exp(logPrefactor(x, a, b)) * fraction(x, a, b)) / a;
  return 1 - (Math.exp(logPrefactor(1 - x, b, a)) * fraction(1 - x, b, a)) / b;
}

/** The density of Beta(a, b) at x, 0 < x < 1. */
function density(x, a, b) {
  return Math.exp(logPrefactor(x, a, b) - Math.log(x) - Math.log1p(-x));
}

/** The p-quantile of Beta(a, b): the x with I_x(a, b) = p (0 < p < 1). */
export function betaIncInv(p, a, b) {
  let lo = 0;
  let hi = 1;
  let x = a / (a + b);
  for (let step = 0; step < 2000; step++) {
    const f = betaInc(x, a, b) - p;
    if (f === 0) return x;
    if (f < 0) lo = x;
    else hi = x;
    const mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi || hi - lo <= 1e-16 * hi) break; // the bracket is as tight as a double allows
    const pdf = density(x, a, b);
    const next = pdf > 0 && Number.isFinite(pdf) ? x - f / pdf : NaN;
    // A Newton step is taken only when it lands inside the bracket and moves; else bisection.
    x = next > lo && next < hi && next !== x ? next : mid;
  }
  return lo + (hi - lo) / 2;
}

/** The Clopper-Pearson interval of k successes in n trials at `level`: [lower, upper]. */
export function clopperPearson(k, n, level) {
  const alpha = 1 - level;
  const lower = k === 0 ? 0 : betaIncInv(alpha / 2, k, n - k + 1);
  const upper = k === n ? 1 : betaIncInv(1 - alpha / 2, k + 1, n - k);
  return [lower, upper];
}
