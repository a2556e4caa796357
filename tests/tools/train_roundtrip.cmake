# cmake -DKILN=path -DWORK=dir -P train_roundtrip.cmake
# End-to-end check of the main job at a tiny size: training is deterministic for a seed (two
# runs give byte-identical checkpoints), resuming continues from a checkpoint, sampling from
# it works, and a checkpoint that does not match the flags is refused with a clear error.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(tiny --steps 6 --batch 4 --block 16 --layers 1 --heads 2 --embd 16 --eval-every 3
         --eval-batches 2 --warmup 2 --seed 7)

function(run_kiln)
  execute_process(COMMAND "${KILN}" ${ARGN}
    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "kiln ${ARGN}: exit status '${status}'\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
  set(last_err "${err}" PARENT_SCOPE)
endfunction()

run_kiln(train ${tiny} --out "${WORK}/a.safetensors")
string(FIND "${last_out}" "final: train" at)
if(at EQUAL -1)
  message(FATAL_ERROR "no final loss line in:\n${last_out}")
endif()
run_kiln(train ${tiny} --out "${WORK}/b.safetensors")
file(SHA256 "${WORK}/a.safetensors" ha)
file(SHA256 "${WORK}/b.safetensors" hb)
if(NOT ha STREQUAL hb)
  message(FATAL_ERROR "two runs with the same seed wrote different checkpoints")
endif()

# Resume to 9 steps from the 6-step checkpoint.
set(more --batch 4 --block 16 --layers 1 --heads 2 --embd 16 --eval-every 3 --eval-batches 2
         --warmup 2 --seed 7)
run_kiln(train ${more} --steps 9 --resume "${WORK}/a.safetensors" --out "${WORK}/c.safetensors")
run_kiln(sample --checkpoint "${WORK}/c.safetensors" --tokens 20 --prompt "It")
string(LENGTH "${last_out}" n)
if(n LESS 22)
  message(FATAL_ERROR "sample too short: '${last_out}'")
endif()

# A checkpoint for another model shape is refused, naming the difference.
execute_process(COMMAND "${KILN}" train --steps 9 --batch 4 --block 16 --layers 2 --heads 2
                        --embd 16 --resume "${WORK}/a.safetensors" --out "${WORK}/d.safetensors"
  RESULT_VARIABLE status ERROR_VARIABLE err OUTPUT_QUIET TIMEOUT 60)
if(NOT status EQUAL 1)
  message(FATAL_ERROR "mismatched resume: exit status '${status}', expected 1:\n${err}")
endif()
string(FIND "${err}" "differs from the one asked for" at)
if(at EQUAL -1)
  message(FATAL_ERROR "mismatched resume: unclear error:\n${err}")
endif()
# A truncated checkpoint is refused, not crashed on.
file(WRITE "${WORK}/cut.safetensors" "garbage")
execute_process(COMMAND "${KILN}" sample --checkpoint "${WORK}/cut.safetensors"
  RESULT_VARIABLE status ERROR_VARIABLE err OUTPUT_QUIET TIMEOUT 60)
if(NOT status EQUAL 1)
  message(FATAL_ERROR "corrupt checkpoint: exit status '${status}', expected 1:\n${err}")
endif()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "train/resume/sample round trip passed")
