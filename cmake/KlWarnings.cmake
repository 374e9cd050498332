# Strict warnings for our own targets only; third-party headers come in as SYSTEM includes.
function(kl_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Woverloaded-virtual>)
  if(KL_WERROR)
    # GCC 12's flow-sensitive warnings report std::optional and std::string internals as uninitialized or
    # overlapping at -O2 (known false positives); they stay visible as warnings but do not fail the build.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-error=maybe-uninitialized -Wno-error=restrict -Wno-error=stringop-overflow>)
  endif()
endfunction()
