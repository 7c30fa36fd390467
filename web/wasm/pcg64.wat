;; numpy's PCG64 and its buffered 32-bit Lemire draw (integers(0, n) for n < 2**32 - 1), the hot loop
;; of web/src/pcg64.js in WebAssembly: 64-bit arithmetic where JavaScript holds 32-bit words in
;; doubles. Built into src/pcg64wasm.generated.js by build.mjs (wabt); pcg64.js checks it against its
;; own JavaScript loop on every load and falls back to that loop where WebAssembly is refused.
;;
;; Memory: the state at 0 (little-endian words: state low 64 bits, state high 64 bits, increment low,
;; increment high, the buffered half's flag (i32) at 32 and the half at 36), the draws from 64.
;; fill(len, n, threshold, counts): len draws of integers(0, n) as u32 from 64; n and threshold are
;; unsigned; with counts (a byte offset, 8-aligned, not 0), also how often each value in 0..n-1 was
;; drawn, as n f64 from counts (zeroed first).
(module
  (memory (export "memory") 1)
  (func (export "fill") (param $len i32) (param $n i32) (param $thr i32) (param $counts i32)
    (local $out i32) (local $v i32) (local $at i32) (local $end i32) (local $x i32) (local $has i32) (local $half i32)
    (local $sl i64) (local $sh i64) (local $il i64) (local $ih i64) (local $nn i64) (local $m i64)
    (local $a0 i64) (local $a1 i64) (local $p00 i64) (local $p01 i64) (local $p10 i64)
    (local $lo i64) (local $hi i64) (local $o i64)
    (local.set $sl (i64.load (i32.const 0)))
    (local.set $sh (i64.load (i32.const 8)))
    (local.set $il (i64.load (i32.const 16)))
    (local.set $ih (i64.load (i32.const 24)))
    (local.set $has (i32.load (i32.const 32)))
    (local.set $half (i32.load (i32.const 36)))
    (local.set $nn (i64.extend_i32_u (local.get $n)))
    (if (local.get $counts)
      (then
        (local.set $at (local.get $counts))
        (local.set $v (i32.add (local.get $counts) (i32.shl (local.get $n) (i32.const 3))))
        (block $zeroed
          (loop $zero
            (br_if $zeroed (i32.ge_u (local.get $at) (local.get $v)))
            (i64.store (local.get $at) (i64.const 0))
            (local.set $at (i32.add (local.get $at) (i32.const 8)))
            (br $zero)))))
    (local.set $out (i32.const 64))
    (local.set $end (i32.add (i32.const 64) (i32.shl (local.get $len) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $out) (local.get $end)))
        (loop $draw
          (if (local.get $has)
            (then
              (local.set $has (i32.const 0))
              (local.set $x (local.get $half)))
            (else
              ;; state = state * 0x2360ed051fc65da44385df649fccf645 + inc (mod 2**128)
              (local.set $a0 (i64.and (local.get $sl) (i64.const 0xffffffff)))
              (local.set $a1 (i64.shr_u (local.get $sl) (i64.const 32)))
              (local.set $p00 (i64.mul (local.get $a0) (i64.const 0x9fccf645)))
              (local.set $p01 (i64.mul (local.get $a0) (i64.const 0x4385df64)))
              (local.set $p10 (i64.mul (local.get $a1) (i64.const 0x9fccf645)))
              ;; the high 64 bits of sl * ML
              (local.set $hi
                (i64.add
                  (i64.add (i64.mul (local.get $a1) (i64.const 0x4385df64)) (i64.shr_u (local.get $p01) (i64.const 32)))
                  (i64.add
                    (i64.shr_u (local.get $p10) (i64.const 32))
                    (i64.shr_u
                      (i64.add
                        (i64.add (i64.shr_u (local.get $p00) (i64.const 32)) (i64.and (local.get $p01) (i64.const 0xffffffff)))
                        (i64.and (local.get $p10) (i64.const 0xffffffff)))
                      (i64.const 32)))))
              (local.set $lo (i64.add (i64.mul (local.get $sl) (i64.const 0x4385df649fccf645)) (local.get $il)))
              (local.set $hi
                (i64.add
                  (i64.add (local.get $hi) (i64.mul (local.get $sl) (i64.const 0x2360ed051fc65da4)))
                  (i64.add
                    (i64.add (i64.mul (local.get $sh) (i64.const 0x4385df649fccf645)) (local.get $ih))
                    (i64.extend_i32_u (i64.lt_u (local.get $lo) (local.get $il))))))
              (local.set $sl (local.get $lo))
              (local.set $sh (local.get $hi))
              ;; XSL-RR: (high xor low) rotated right by the state's top six bits
              (local.set $o (i64.rotr (i64.xor (local.get $hi) (local.get $lo)) (i64.shr_u (local.get $hi) (i64.const 58))))
              (local.set $x (i32.wrap_i64 (local.get $o)))
              (local.set $half (i32.wrap_i64 (i64.shr_u (local.get $o) (i64.const 32))))
              (local.set $has (i32.const 1))))
          ;; Lemire: m = x * n, rejected while its low 32 bits are below the threshold
          (local.set $m (i64.mul (i64.extend_i32_u (local.get $x)) (local.get $nn)))
          (br_if $draw (i32.lt_u (i32.wrap_i64 (local.get $m)) (local.get $thr))))
        (local.set $v (i32.wrap_i64 (i64.shr_u (local.get $m) (i64.const 32))))
        (i32.store (local.get $out) (local.get $v))
        (if (local.get $counts)
          (then
            (local.set $at (i32.add (local.get $counts) (i32.shl (local.get $v) (i32.const 3))))
            (f64.store (local.get $at) (f64.add (f64.load (local.get $at)) (f64.const 1)))))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $next)))
    (i64.store (i32.const 0) (local.get $sl))
    (i64.store (i32.const 8) (local.get $sh))
    (i32.store (i32.const 32) (local.get $has))
    (i32.store (i32.const 36) (local.get $half))))
