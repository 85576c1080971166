from pacer_control.main import main

main()
